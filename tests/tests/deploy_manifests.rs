//! The manifests in deploy/ that are derived from code stay in step with it.

use reconciler_host::rbac::{Plurals, cluster_role};
use reconciler_tests::{example_plugin, load, root};

const EXAMPLES: [&str; 5] = [
    "kubernetescluster",
    "memcached",
    "podset",
    "rollout_restarter",
    "rollout_schedules",
];

#[test]
fn the_cluster_role_in_deploy_is_what_rbac_generates_for_the_example_plugins() {
    let metadata: Vec<_> = EXAMPLES
        .iter()
        .map(|name| load(&example_plugin(name)).metadata().clone())
        .collect();
    let plurals = Plurals::from_crds(&root().join("crds")).unwrap();
    let generated = cluster_role(&metadata, &plurals, "reconciler-host");
    let path = root().join("deploy/cluster-role.yaml");
    let checked_in = std::fs::read_to_string(&path).unwrap();
    assert!(
        generated == checked_in,
        "{} is stale; regenerate it with\n  cargo run -p reconciler-host -- rbac --plugins-dir plugins --crds crds > deploy/cluster-role.yaml\n--- generated:\n{generated}",
        path.display()
    );
}

fn manifest(name: &str) -> serde_json::Value {
    let path = root().join("deploy").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn kustomization_lists_every_manifest_in_deploy() {
    let kustomization = manifest("kustomization.yaml");
    let mut listed: Vec<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut present: Vec<String> = std::fs::read_dir(root().join("deploy"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    present.sort();
    assert_eq!(listed, present);
    for name in &present {
        let object = manifest(name);
        assert!(
            object["apiVersion"].is_string() && object["kind"].is_string(),
            "{name}"
        );
    }
}

#[test]
fn the_deployment_runs_the_host_with_flags_it_has() {
    let deployment = manifest("deployment.yaml");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let parsed = <reconciler_host::cli::Cli as clap::Parser>::try_parse_from(
        std::iter::once("reconciler-host").chain(args.iter().copied()),
    );
    assert!(parsed.is_ok(), "{args:?}: {}", parsed.unwrap_err());
    assert!(args.contains(&"--leader-election"), "{args:?}");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    assert!(container["resources"]["limits"]["memory"].is_string());
}
