//! Labelling a primary with its shard never creates it, nor labels a
//! version the replica did not read (issue 51, point 8): the host's label
//! write (`ClusterBackend::set_label` of `shard_selection::primary_label`)
//! against a real API server, for a PodSet deleted since it was read, one
//! changed since, and one unchanged; and taking the label off, which is
//! refused as well on a version not read. The control: a server-side apply of
//! the label, even naming the read's resourceVersion, brings the deleted
//! PodSet back, which is why the label is a patch.

use anyhow::{Context, Result, ensure};
use reconciler_host::cluster::kubernetes::KubernetesBackend;
use reconciler_host::cluster::{ClusterBackend, ObjectKey};
use reconciler_host::engine::shard_selection::{
    SHARD_FIELD_MANAGER, SHARD_LABEL, label_of, primary_label,
};
use reconciler_sdk::KindRef;
use reconciler_tests::real_cluster::{RealCluster, Suite};
use reconciler_tests::root;
use serde_json::json;

const SUITE: Suite = Suite {
    name: "shard_labels_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

fn podsets() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "PodSet")
}

#[test]
fn labelling_a_primary_never_creates_it_nor_labels_a_version_not_read() {
    SUITE.run(
        "labelling_a_primary_never_creates_it_nor_labels_a_version_not_read",
        async |cx| labels(cx).await,
    );
}

fn name_of(object: &serde_json::Value) -> Result<&str> {
    object["metadata"]["name"].as_str().context("a name")
}

async fn labels(cx: &mut RealCluster) -> Result<()> {
    cx.install_crds(&root().join("crds/podset.yaml")).await?;
    let backend = KubernetesBackend::new(cx.client.clone());
    let podset = |name: &str| {
        json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": name}, "spec": {"size": 1}})
    };
    let key = |name: &str| ObjectKey::new(podsets(), Some(&cx.namespace), name);

    cx.step("1. deleted since it was read: refused, and not brought back");
    let read = cx.create(podset("gone")).await?;
    cx.delete(&podsets(), "gone").await?;
    let refused = backend
        .set_label(
            &key(name_of(&read)?),
            primary_label(&read, Some("00a")).context("a version")?,
        )
        .await;
    ensure!(
        refused.is_err(),
        "labelling a deleted PodSet was accepted: {refused:?}"
    );
    ensure!(
        cx.get(&podsets(), "gone").await?.is_none(),
        "labelling a deleted PodSet created it"
    );
    cx.step(format!("refused: {}", refused.unwrap_err()));

    cx.step("2. changed since it was read: refused, the change kept, no label");
    let read = cx.create(podset("changed")).await?;
    cx.merge_patch(&podsets(), "changed", json!({"spec": {"size": 2}}))
        .await?;
    let refused = backend
        .set_label(
            &key(name_of(&read)?),
            primary_label(&read, Some("00a")).context("a version")?,
        )
        .await;
    ensure!(refused.is_err(), "a stale read was labelled: {refused:?}");
    let stored = cx.must_get(&podsets(), "changed").await?;
    ensure!(
        label_of(&stored).is_none() && stored["spec"]["size"] == 2,
        "{stored}"
    );

    cx.step("3. unchanged since it was read: labelled");
    let read = backend
        .get(&key("changed"))
        .await?
        .context("the PodSet is there")?;
    let labelled = backend
        .set_label(
            &key("changed"),
            primary_label(&read, Some("00a")).context("a version")?,
        )
        .await?;
    ensure!(label_of(&labelled) == Some("00a"), "{labelled}");

    cx.step("3b. taken off (a kind with two roles), at the version read alone");
    let refused = backend
        .set_label(
            &key("changed"),
            primary_label(&read, None).context("a version")?,
        )
        .await;
    ensure!(
        refused.is_err(),
        "a label was taken off a version not read: {refused:?}"
    );
    let unlabelled = backend
        .set_label(
            &key("changed"),
            primary_label(&labelled, None).context("a version")?,
        )
        .await?;
    ensure!(
        label_of(&unlabelled).is_none() && unlabelled["spec"]["size"] == 2,
        "{unlabelled}"
    );

    cx.step("4. the control: an apply of the label, version and all, recreates a deleted PodSet");
    let read = cx.create(podset("control")).await?;
    cx.delete(&podsets(), "control").await?;
    let applied = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "control", "namespace": cx.namespace,
            "resourceVersion": read["metadata"]["resourceVersion"],
            "labels": {SHARD_LABEL: "00a"}}});
    let created = backend.apply(applied, SHARD_FIELD_MANAGER, true).await;
    ensure!(
        created.is_ok() && cx.get(&podsets(), "control").await?.is_some(),
        "the apply did not create the PodSet ({created:?}): this test no longer shows the hole it guards"
    );
    Ok(())
}
