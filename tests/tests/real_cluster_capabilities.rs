//! A plugin does only what it declared, checked against a real API server:
//! `reconciler-host run` with the compiled hostile plugin, whose `spec.mode`
//! picks the misbehaviour, and plain API calls where the point is what the
//! API server itself does (which the embedded cluster must match).
//!
//! Skipped (passing, with a SKIPPED line) unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set:
//!
//! ```text
//! scripts/build-plugins
//! eval "$(../shared/kube/kube up)"
//! RECONCILER_E2E=1 cargo test -p reconciler-tests --test real_cluster_capabilities -- --nocapture
//! ```
//!
//! Each test runs in a namespace of its own with a host of its own (see
//! `reconciler_tests::real_cluster`), so they run in parallel, also beside
//! other real-cluster suites on the same cluster.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use reconciler_host::cluster::kubernetes::KubernetesBackend;
use reconciler_host::cluster::{BackendError, ClusterBackend, ObjectKey, Propagation};
use reconciler_sdk::KindRef;
use reconciler_tests::real_cluster::{
    Probe, RealCluster, Suite, controller_of, controller_reference, owner_references, uid_of,
};
use reconciler_tests::{example_plugin, root, test_plugin};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "real_cluster_capabilities",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

// The reasons of the Warning Events on a primary whose response the host
// refused (host/src/engine/plan.rs, plugin/errors.rs): users filter Events by
// them, so they are part of the interface.
/// A response the plugin should not have sent: a delete of an object it
/// does not control, a field the host owns.
const INVALID_RESPONSE: &str = "InvalidResponse";
/// An owned object that another controller controls.
const ALREADY_OWNED: &str = "AlreadyOwned";
/// An owned object that exists with no controller.
const ADOPTION_REFUSED: &str = "AdoptionRefused";
/// The finalizer the hostile plugin declares.
const HOSTILE_FINALIZER: &str = "hostile.example.com/cleanup";
/// The annotation that lets the hostile plugin say `finalized`.
const CLEANUP_DONE: &str = "hostile.example.com/cleanup-done";

/// Host start (the plugin compile is cached across tests), one reconcile,
/// and the Event: seconds; the margin is for a loaded CI machine.
const HOST_TIMEOUT: Duration = Duration::from_secs(90);
/// Objects with no finalizers left go at once; the namespace controller
/// then takes a few rounds.
const NAMESPACE_GONE_TIMEOUT: Duration = Duration::from_secs(90);

fn hostile_kind() -> KindRef {
    KindRef::new("hostile.example.com", "v1", "Hostile")
}

fn config_maps() -> KindRef {
    KindRef::new("", "v1", "ConfigMap")
}

fn hostile_crd() -> PathBuf {
    root().join("tests/crds/hostile.yaml")
}

fn hostile(name: &str, mode: &str, targets: &[&str]) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
           "metadata": {"name": name},
           "spec": {"mode": mode, "targets": targets}})
}

fn config_map(name: &str, k: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
           "data": {"k": k}})
}

/// Waits until the host has applied the ConfigMap `name` as the child of
/// `owner` (controller reference to its uid); returns the ConfigMap.
async fn wait_for_child(cx: &RealCluster, name: &str, owner: &Value) -> Result<Value> {
    let owner_uid = uid_of(owner)?;
    cx.wait_for(
        &format!("ConfigMap {name} controlled by its Hostile (uid {owner_uid})"),
        HOST_TIMEOUT,
        async || {
            let Some(child) = cx.get(&config_maps(), name).await? else {
                return Ok(Probe::Pending("not found".to_string()));
            };
            Ok(match controller_of(&child)? {
                Some(c) if c.uid == owner_uid => Probe::Ready(child),
                other => Probe::Pending(format!("controller {other:?}")),
            })
        },
    )
    .await
}

/// What is wrong with ConfigMap `name` if it is no longer the object `uid`
/// with `data.k` `k`: deleted, replaced, or changed.
async fn changed(cx: &RealCluster, name: &str, uid: &str, k: &str) -> Result<Option<String>> {
    Ok(match cx.get(&config_maps(), name).await? {
        None => Some(format!("ConfigMap {name} was deleted")),
        Some(now) if uid_of(&now)? != uid => Some(format!(
            "ConfigMap {name} was deleted and created again (uid {uid} is now {})",
            uid_of(&now)?
        )),
        Some(now) if now["data"]["k"] != k => Some(format!(
            "ConfigMap {name} was changed: data.k {} instead of {k:?}",
            now["data"]["k"]
        )),
        Some(_) => None,
    })
}

/// A refused response is refused whole: the hostile modes apply the
/// primary's own ConfigMap (named after it) before the offending item, and
/// it must not appear.
async fn ensure_nothing_applied(cx: &RealCluster, primary: &str) -> Result<()> {
    ensure!(
        cx.get(&config_maps(), primary).await?.is_none(),
        "ConfigMap {primary} exists: part of a refused response was applied"
    );
    Ok(())
}

/// Point 1: a requested delete of an object the primary does not control
/// (no owner at all, or a sibling primary's child) is refused, whole
/// response, naming the item.
#[test]
fn delete_of_objects_the_primary_does_not_control_is_refused() {
    SUITE.run("delete_of_objects_the_primary_does_not_control_is_refused", async |cx| {
        cx.install_crds(&hostile_crd()).await?;
        cx.start_host(&[test_plugin("hostile")])?;
        let stranger = cx.create(config_map("stranger", "7")).await?;
        let sibling = cx.create(hostile("sibling", "", &[])).await?;
        let sibling_child = wait_for_child(cx, "sibling", &sibling).await?;
        let targets = [
            ("stranger", uid_of(&stranger)?, "7"),
            ("sibling", uid_of(&sibling_child)?, "v"),
        ];

        cx.create(hostile("attacker", "delete-stranger", &["stranger", "sibling"]))
            .await?;
        let expected = format!(
            "delete[0] (v1 ConfigMap stranger): not controlled by Hostile {}/attacker",
            cx.namespace
        );
        let event = cx
            .wait_for_warning("Hostile", "attacker", &[&expected], HOST_TIMEOUT, async || {
                for (name, uid, k) in &targets {
                    if let Some(wrong) = changed(cx, name, uid, k).await? {
                        return Ok(Some(format!(
                            "{wrong}: the host carried out a delete of an object Hostile attacker does not control"
                        )));
                    }
                }
                Ok(None)
            })
            .await?;
        ensure!(
            event.reason == INVALID_RESPONSE,
            "the refusal's reason should be {INVALID_RESPONSE}: {event}"
        );
        for (name, uid, k) in &targets {
            if let Some(wrong) = changed(cx, name, uid, k).await? {
                bail!("{wrong} although the response was refused");
            }
        }
        ensure_nothing_applied(cx, "attacker").await?;
        Ok(())
    });
}

/// Point 2: applying an object controlled by someone else is refused, whole
/// response, with a Warning Event naming the current controller; the object
/// keeps its data and its single controller reference.
#[test]
fn adopting_an_object_controlled_by_another_owner_is_refused() {
    SUITE.run("adopting_an_object_controlled_by_another_owner_is_refused", async |cx| {
        cx.install_crds(&hostile_crd()).await?;
        cx.start_host(&[test_plugin("hostile")])?;
        let keeper = cx.create(config_map("keeper", "1")).await?;
        let mut victim = config_map("victim", "7");
        victim["metadata"]["ownerReferences"] = json!([controller_reference(&keeper)?]);
        let victim = cx.create(victim).await?;
        let victim_uid = uid_of(&victim)?;
        let keeper_uid = uid_of(&keeper)?;

        cx.create(hostile("attacker", "adopt", &["victim"])).await?;
        let event = cx
            .wait_for_warning(
                "Hostile",
                "attacker",
                &["ConfigMap victim", "controlled by ConfigMap keeper"],
                HOST_TIMEOUT,
                async || {
                    if let Some(wrong) = changed(cx, "victim", &victim_uid, "7").await? {
                        return Ok(Some(wrong));
                    }
                    // The API server refuses a second controller (422), so
                    // an apply that reached it shows as ApplyRejected.
                    let events = cx.events_about("Hostile", "attacker").await?;
                    Ok(events.iter().find(|e| e.reason == "ApplyRejected").map(|e| {
                        format!(
                            "the host sent the apply of ConfigMap victim to the API server \
                             instead of refusing the response up front: {e}"
                        )
                    }))
                },
            )
            .await?;
        ensure!(
            event.reason == ALREADY_OWNED,
            "the refusal's reason should be {ALREADY_OWNED}: {event}"
        );

        let now = cx.must_get(&config_maps(), "victim").await?;
        if let Some(wrong) = changed(cx, "victim", &victim_uid, "7").await? {
            bail!("{wrong} although the response was refused");
        }
        ensure_nothing_applied(cx, "attacker").await?;
        let refs = owner_references(&now)?;
        ensure!(
            refs.len() == 1 && refs[0].uid == keeper_uid && refs[0].controller == Some(true),
            "ConfigMap victim should keep exactly its controller reference to keeper (uid {keeper_uid}); it has {refs:?}"
        );
        Ok(())
    });
}

/// Point 2: an existing object with no controller is not taken over
/// silently: refused by default, and the Event says how to resolve it.
#[test]
fn adopting_an_orphan_is_refused_with_a_way_out() {
    SUITE.run("adopting_an_orphan_is_refused_with_a_way_out", async |cx| {
        cx.install_crds(&hostile_crd()).await?;
        cx.start_host(&[test_plugin("hostile")])?;
        let orphan = cx.create(config_map("orphan", "7")).await?;
        let orphan_uid = uid_of(&orphan)?;

        cx.create(hostile("attacker", "adopt", &["orphan"])).await?;
        let settled = async || {
            if let Some(wrong) = changed(cx, "orphan", &orphan_uid, "7").await? {
                return Ok(Some(format!("{wrong}: the orphan was taken over")));
            }
            let refs = owner_references(&cx.must_get(&config_maps(), "orphan").await?)?;
            Ok((!refs.is_empty())
                .then(|| format!("ConfigMap orphan was adopted: ownerReferences {refs:?}")))
        };
        // The way out: delete it (the host then creates its own), or make
        // the primary its controller by hand.
        let delete_it = format!("kubectl delete configmap orphan -n {}", cx.namespace);
        let event = cx
            .wait_for_warning(
                "Hostile",
                "attacker",
                &["ConfigMap orphan", &delete_it],
                HOST_TIMEOUT,
                settled,
            )
            .await?;
        ensure!(
            event.reason == ADOPTION_REFUSED,
            "the refusal's reason should be {ADOPTION_REFUSED}: {event}"
        );

        let now = cx.must_get(&config_maps(), "orphan").await?;
        ensure!(
            now["data"]["k"] == "7" && owner_references(&now)?.is_empty(),
            "ConfigMap orphan should be as the test made it (data.k 7, no owner): {now}"
        );
        ensure_nothing_applied(cx, "attacker").await?;
        Ok(())
    });
}

/// Point 3, the API server's side: a second controller reference is
/// answered 422, while non-controller references from two field managers
/// merge by uid. The embedded cluster must answer the same.
#[test]
fn the_api_server_refuses_a_second_controller_and_merges_other_owners() {
    SUITE.run(
        "the_api_server_refuses_a_second_controller_and_merges_other_owners",
        async |cx| {
            let owner_a = cx.create(config_map("owner-a", "a")).await?;
            let owner_b = cx.create(config_map("owner-b", "b")).await?;
            let with_owner = |owner: Value| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "child", "ownerReferences": [owner]}})
            };

            cx.apply_as(
                "e2e-manager-a",
                &with_owner(controller_reference(&owner_a)?),
            )
            .await?
            .context("applying ConfigMap child with a controller reference to owner-a")?;
            let refused = cx
                .apply_as(
                    "e2e-manager-b",
                    &with_owner(controller_reference(&owner_b)?),
                )
                .await?;
            match refused {
                Err(kube::Error::Api(status)) if status.code == 422 => ensure!(
                    status
                        .message
                        .contains("Only one reference can have Controller set to true"),
                    "422, but not for the second controller: {}",
                    status.message
                ),
                Err(e) => bail!("a second controller reference should be answered 422, not: {e}"),
                Ok(stored) => bail!("a second controller reference was accepted: {stored}"),
            }
            let child = cx.must_get(&config_maps(), "child").await?;
            let controller =
                controller_of(&child)?.context("ConfigMap child lost its controller")?;
            ensure!(
                controller.uid == uid_of(&owner_a)?,
                "ConfigMap child's controller should still be owner-a: {controller:?}"
            );

            let mut plain = controller_reference(&owner_b)?;
            plain["controller"] = json!(false);
            let merged = cx
                .apply_as("e2e-manager-b", &with_owner(plain))
                .await?
                .context("applying a non-controller reference to owner-b from another manager")?;
            let uids: BTreeSet<String> = owner_references(&merged)?
                .into_iter()
                .map(|r| r.uid)
                .collect();
            let expected: BTreeSet<String> = [uid_of(&owner_a)?, uid_of(&owner_b)?].into();
            ensure!(
                uids == expected,
                "references from two managers should merge by uid into {expected:?}; got {uids:?}"
            );
            ensure!(
                controller_of(&merged)?.map(|c| c.uid) == Some(uid_of(&owner_a)?),
                "owner-a should still be the controller: {merged}"
            );
            Ok(())
        },
    );
}

/// Point 8: the namespace of a primary with a finalizer is deleted; the
/// plugin says `finalized` but its cleanup re-applies a ConfigMap, which the
/// API server refuses in a terminating namespace. The host must still drop
/// its finalizer, so the namespace goes, and log why.
#[test]
fn a_terminating_namespace_is_not_held_by_refused_cleanup() {
    SUITE.run("a_terminating_namespace_is_not_held_by_refused_cleanup", async |cx| {
        cx.install_crds(&hostile_crd()).await?;
        cx.start_host(&[test_plugin("hostile")])?;
        let done = json!({"metadata": {"annotations": {CLEANUP_DONE: "true"}}});
        // Default mode: owns ConfigMap `tidy`, re-applied while deleting,
        // which the namespace controller may or may not have deleted first.
        let mut tidy = hostile("tidy", "", &[]);
        tidy["metadata"]["annotations"] = done["metadata"]["annotations"].clone();
        let tidy = cx.create(tidy).await?;
        wait_for_child(cx, "tidy", &tidy).await?;
        // Fails every reconcile, so it has the finalizer but no ConfigMap:
        // its cleanup's apply is a create, always refused once the
        // namespace terminates. This is the case that must not hang.
        let mut doomed = hostile("doomed", "error", &[]);
        doomed["metadata"]["annotations"] = done["metadata"]["annotations"].clone();
        cx.create(doomed).await?;
        for name in ["tidy", "doomed"] {
            cx.wait_for(
                &format!("Hostile {name} to carry {HOSTILE_FINALIZER}"),
                HOST_TIMEOUT,
                async || {
                    let now = cx.must_get(&hostile_kind(), name).await?;
                    let finalizers = now["metadata"]["finalizers"].clone();
                    Ok(match finalizers.as_array() {
                        Some(f) if f.iter().any(|f| f == HOSTILE_FINALIZER) => Probe::Ready(()),
                        _ => Probe::Pending(format!("finalizers {finalizers}")),
                    })
                },
            )
            .await?;
        }
        ensure!(
            cx.get(&config_maps(), "doomed").await?.is_none(),
            "Hostile doomed (mode error) should have no ConfigMap before the namespace goes"
        );

        let namespaces = cx
            .api(&KindRef::new("", "v1", "Namespace"))
            .await?;
        namespaces
            .delete(&cx.namespace, &Default::default())
            .await
            .context("deleting the test's namespace")?;
        cx.step("deleted the namespace; waiting until it is gone");
        let gone = cx.wait_for_namespace_gone(NAMESPACE_GONE_TIMEOUT).await;
        if let Err(e) = gone {
            let mut held = Vec::new();
            for name in ["tidy", "doomed"] {
                if let Some(h) = cx.get(&hostile_kind(), name).await? {
                    held.push(format!("Hostile {name}: finalizers {}", h["metadata"]["finalizers"]));
                }
            }
            bail!("{e:#}; still there: {held:?}");
        }
        let host = cx.host()?;
        let why: Vec<String> = host
            .log_text()
            .lines()
            // The namespace's name says what the test is about: not in it.
            .map(|l| l.replace(&cx.namespace, "<namespace>"))
            .filter(|l| {
                let lower = l.to_lowercase();
                l.contains("doomed")
                    && l.contains(HOSTILE_FINALIZER)
                    && (lower.contains("terminat") || lower.contains("being deleted"))
            })
            .collect();
        ensure!(
            !why.is_empty(),
            "the host's log should say why it dropped Hostile doomed's finalizer (a line naming \
             doomed, the finalizer and the namespace being deleted); none does"
        );
        cx.step(format!("the host said: {}", why[0]));
        Ok(())
    });
}

/// Point 9: status writes and deletes carry a precondition, so a write
/// computed from an object never lands on a namesake created since. Forcing
/// the host to race a delete and re-create is not deterministic, so this
/// drives the Kubernetes backend's calls directly, as the engine makes them.
#[test]
fn stale_status_writes_and_deletes_miss_a_namesake() {
    SUITE.run("stale_status_writes_and_deletes_miss_a_namesake", async |cx| {
        cx.install_crds(&hostile_crd()).await?;
        let backend = KubernetesBackend::new(cx.client.clone());
        let manager = "reconciler-host/hostile";
        let key = ObjectKey::new(hostile_kind(), Some(&cx.namespace), "stale");

        let old = cx.create(hostile("stale", "", &[])).await?;
        let old_version = old["metadata"]["resourceVersion"]
            .as_str()
            .context("the created Hostile has no resourceVersion")?
            .to_string();
        // The precondition holds while the object is as read.
        let written = backend
            .apply_status(&key, json!({"writer": "current"}), manager, Some(&old_version))
            .await
            .context("a status write at the current resourceVersion should succeed")?;
        ensure!(
            written["status"]["writer"] == "current",
            "the status write did not land: {written}"
        );

        cx.delete(&hostile_kind(), "stale").await?;
        cx.wait_for("Hostile stale to be gone", HOST_TIMEOUT, async || {
            Ok(match cx.get(&hostile_kind(), "stale").await? {
                None => Probe::Ready(()),
                Some(h) => Probe::Pending(format!("finalizers {}", h["metadata"]["finalizers"])),
            })
        })
        .await?;
        let new = cx.create(hostile("stale", "", &[])).await?;
        match backend
            .apply_status(&key, json!({"writer": "old"}), manager, Some(&old_version))
            .await
        {
            Err(BackendError::Conflict { .. }) => {}
            other => bail!(
                "a status write for the deleted Hostile should be a Conflict on its namesake, not {other:?}"
            ),
        }
        let now = cx.must_get(&hostile_kind(), "stale").await?;
        ensure!(
            uid_of(&now)? == uid_of(&new)? && now.get("status").is_none_or(|s| s.get("writer").is_none()),
            "the namesake got the old object's status: {now}"
        );

        // A delete meant for a ConfigMap that is gone leaves its namesake.
        let first = cx.create(config_map("namesake", "1")).await?;
        cx.delete(&config_maps(), "namesake").await?;
        let second = cx.create(config_map("namesake", "2")).await?;
        let cm_key = ObjectKey::new(config_maps(), Some(&cx.namespace), "namesake");
        backend
            .delete(&cm_key, Propagation::Background, Some(&uid_of(&first)?))
            .await
            .context("a delete whose object is gone should not be an error")?;
        let kept = cx
            .get(&config_maps(), "namesake")
            .await?
            .context("the delete for the old ConfigMap deleted its namesake")?;
        ensure!(
            uid_of(&kept)? == uid_of(&second)?,
            "ConfigMap namesake was replaced: {kept}"
        );
        backend
            .delete(&cm_key, Propagation::Background, Some(&uid_of(&second)?))
            .await
            .context("a delete with the current uid")?;
        ensure!(
            cx.get(&config_maps(), "namesake").await?.is_none(),
            "a delete with the current uid should delete ConfigMap namesake"
        );
        Ok(())
    });
}

/// Point 5: a written kind cannot carry an ownerReference: the response is
/// refused and the ServiceAccount never created (a dangling reference would
/// have the garbage collector delete it, or someone else's object).
#[test]
fn an_owner_reference_through_a_written_kind_is_refused() {
    SUITE.run(
        "an_owner_reference_through_a_written_kind_is_refused",
        async |cx| {
            cx.install_crds(&hostile_crd()).await?;
            cx.start_host(&[test_plugin("hostile")])?;
            cx.create(hostile("sneaky", "owner-reference-via-writes", &[]))
                .await?;
            let accounts = cx.api(&KindRef::new("", "v1", "ServiceAccount")).await?;
            let created_accounts = async || -> Result<BTreeSet<String>> {
                Ok(accounts
                    .list_metadata(&Default::default())
                    .await
                    .context("listing ServiceAccounts")?
                    .items
                    .into_iter()
                    .filter_map(|a| a.metadata.name)
                    // The service-account controller's, in every namespace.
                    .filter(|n| n != "default")
                    .collect())
            };
            let event = cx
                .wait_for_warning(
                    "Hostile",
                    "sneaky",
                    &["ServiceAccount", "ownerReferences"],
                    HOST_TIMEOUT,
                    async || {
                        let made = created_accounts().await?;
                        if !made.is_empty() {
                            return Ok(Some(format!("ServiceAccounts were created: {made:?}")));
                        }
                        let status =
                            cx.must_get(&hostile_kind(), "sneaky").await?["status"].clone();
                        Ok((status["ok"] == true).then(|| {
                            "Hostile sneaky was reconciled in the default mode: this build of the \
                         hostile plugin has no mode owner-reference-via-writes"
                                .to_string()
                        }))
                    },
                )
                .await?;
            ensure!(
                event.reason == INVALID_RESPONSE,
                "the refusal's reason should be {INVALID_RESPONSE}: {event}"
            );
            let made = created_accounts().await?;
            ensure!(made.is_empty(), "ServiceAccounts were created: {made:?}");
            ensure_nothing_applied(cx, "sneaky").await?;
            Ok(())
        },
    );
}

/// Point 4: a plugin whose namespaced primary owns a cluster-scoped kind
/// (ClusterRole) is refused at load, saying so; the other plugin of the
/// same directory keeps serving.
#[test]
fn a_plugin_owning_a_cluster_scoped_kind_is_refused_at_load() {
    SUITE.run(
        "a_plugin_owning_a_cluster_scoped_kind_is_refused_at_load",
        async |cx| {
            let variant = root().join("target/test-plugins/hostile-cluster-scope.wasm");
            ensure!(
                variant.is_file(),
                "{} is missing: scripts/build-plugins builds it once the hostile plugin has its \
             cluster-scope feature",
                variant.display()
            );
            cx.install_crds(&hostile_crd()).await?;
            cx.install_crds(&root().join("crds/podset.yaml")).await?;
            cx.start_host(&[variant, example_plugin("podset")])?;
            let line = cx
                .wait_for_log(&["hostile", "ClusterRole", "cluster-scoped"], HOST_TIMEOUT)
                .await?;
            cx.step(format!("the host said: {line}"));

            let podset = cx
                .create(
                    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
                           "metadata": {"name": "web"}, "spec": {"size": 1}}),
                )
                .await?;
            let podset_uid = uid_of(&podset)?;
            let deployments = KindRef::new("apps", "v1", "Deployment");
            cx.wait_for(
                "Deployment web controlled by PodSet web",
                HOST_TIMEOUT,
                async || {
                    let Some(deployment) = cx.get(&deployments, "web").await? else {
                        return Ok(Probe::Pending("not found".to_string()));
                    };
                    Ok(match controller_of(&deployment)? {
                        Some(c) if c.uid == podset_uid => Probe::Ready(()),
                        other => Probe::Pending(format!("controller {other:?}")),
                    })
                },
            )
            .await?;
            Ok(())
        },
    );
}
