//! `simulate` and `dev` run objects read from files past the plugin that
//! serves admission for their kind: a denied object is reported and not
//! stored, a defaulted one is stored defaulted.

use std::sync::Arc;

use reconciler_host::cluster::VirtualClock;
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::process::dev::ManifestDir;
use reconciler_host::process::simulate::{SimulationConfig, simulate};
use reconciler_tests::{example_plugin, load};
use serde_json::{Value, json};

fn cluster_object(name: &str, masters: i64, version: Option<&str>) -> Value {
    let mut spec = json!({"masters": masters, "workers": 1, "timeoutSeconds": 600});
    if let Some(v) = version {
        spec["version"] = json!(v);
    }
    json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn stored<'a>(objects: &'a [Value], name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == "KubernetesCluster" && o["metadata"]["name"] == name)
}

#[tokio::test]
async fn simulate_reports_denied_objects_and_stores_defaulted_ones() {
    let plugin = Arc::new(load(&example_plugin("kubernetescluster")));
    let objects = vec![
        cluster_object("staging", 1, None),
        cluster_object("staging", 3, Some("1.33")),
    ];
    let (report, _) = simulate(vec![plugin], objects, &SimulationConfig::default())
        .await
        .unwrap();
    let objects = report.objects();
    let staging = stored(&objects, "staging").expect("the create was admitted");
    assert_eq!(staging["spec"]["version"], "1.33", "defaulted");
    assert_eq!(
        staging["spec"]["masters"], 1,
        "the denied update was not stored"
    );
    let rendered = report.render();
    assert!(
        rendered.contains("admitted KubernetesCluster default/staging by kubernetescluster (defaulted)")
            && rendered.contains(
                "denied KubernetesCluster default/staging by kubernetescluster: spec.masters cannot change after creation: it is 1, the update asks for 3"
            )
            && rendered.contains("(not stored)"),
        "{rendered}"
    );
}

#[test]
fn dev_denies_an_edit_of_masters_and_keeps_the_stored_object() {
    let plugin = Arc::new(load(&example_plugin("kubernetescluster")));
    let plugins = vec![plugin];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("clusters.yaml");
    let write = |object: &Value| {
        std::fs::write(&file, serde_yaml_ng::to_string(object).unwrap()).unwrap();
    };
    let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
    let mut manifests = ManifestDir::default();

    write(&cluster_object("prod", 3, None));
    let lines = manifests.sync_admitted(dir.path(), &cluster, &plugins);
    assert!(
        lines.iter().any(|l| l
            .contains("admitted KubernetesCluster default/prod by kubernetescluster (defaulted)")),
        "{lines:?}"
    );
    let objects = cluster.objects();
    assert_eq!(stored(&objects, "prod").unwrap()["spec"]["version"], "1.33");

    write(&cluster_object("prod", 5, Some("1.33")));
    let lines = manifests.sync_admitted(dir.path(), &cluster, &plugins);
    assert!(
        lines.iter().any(|l| l.starts_with(
            "denied KubernetesCluster default/prod by kubernetescluster: spec.masters cannot change"
        )),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.starts_with("updated")), "{lines:?}");
    let objects = cluster.objects();
    assert_eq!(stored(&objects, "prod").unwrap()["spec"]["masters"], 3);

    // Without plugins (or with none serving the kind) the same edit is stored.
    let lines = ManifestDir::default().sync_admitted(dir.path(), &cluster, &[]);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("created") || l.starts_with("updated")),
        "{lines:?}"
    );
    let objects = cluster.objects();
    assert_eq!(stored(&objects, "prod").unwrap()["spec"]["masters"], 5);
}
