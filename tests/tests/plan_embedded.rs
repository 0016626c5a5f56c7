//! `plan --objects` and `test --against` on the embedded cluster, as a
//! user runs them: the host binary, its output and its exit status. The
//! candidate `podset-doubled-js` asks for twice each PodSet's size; the
//! serving version is `plugins/podset-js`.

use std::path::PathBuf;
use std::process::{Command, Output};

use reconciler_tests::{example_plugin, root, test_plugin};
use serde_json::{Value, json};

const HOST: &str = env!("CARGO_BIN_EXE_reconciler-host-under-test");

fn serving() -> PathBuf {
    example_plugin("podset-js/podset-js")
}

fn host(args: &[&str]) -> Output {
    Command::new(HOST)
        .arg("--compile-cache")
        .arg(reconciler_tests::test_compile_cache_dir())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("the host runs")
}

fn path(p: PathBuf) -> String {
    p.display().to_string()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn plan_over_the_embedded_cluster_names_each_changed_field_and_exits_1() {
    let objects = path(root().join("examples/podset.yaml"));
    let crds = path(root().join("crds"));
    let (candidate, serving) = (path(test_plugin("podset-doubled-js")), path(serving()));
    let out = host(&[
        "plan",
        &candidate,
        "--against",
        &serving,
        "--objects",
        &objects,
        "--crds",
        &crds,
        "--output",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(report["serving"]["name"], "podset-js", "{report:#}");
    assert_eq!(report["primaries"], 1, "{report:#}");
    let differences = &report["objects"][0]["differences"];
    // examples/podset.yaml asks for 3 replicas.
    assert!(
        differences.as_array().unwrap().contains(&json!({
            "in": "apply", "object": "apps/v1 Deployment default/example",
            "path": "spec.replicas", "serving": 3, "candidate": 6})),
        "{report:#}"
    );

    // The same version against itself: nothing to report, exit 0.
    let out = host(&[
        "plan",
        &serving,
        "--against",
        &serving,
        "--objects",
        &objects,
        "--crds",
        &crds,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("0 of 1 PodSet(s) decided differently"),
        "{}",
        text(&out)
    );
}

#[test]
fn plan_refuses_a_candidate_of_another_kind_with_status_2() {
    let out = host(&[
        "plan",
        &path(example_plugin("memcached")),
        "--against",
        &path(serving()),
        "--objects",
        &path(root().join("examples/podset.yaml")),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("not two versions of one plugin"),
        "{}",
        text(&out)
    );
}

#[test]
fn test_against_compares_the_golden_cases_instead_of_checking_them() {
    let cases = path(root().join("plugins/podset/cases"));
    let (candidate, serving) = (path(test_plugin("podset-doubled-js")), path(serving()));
    let out = host(&["test", &candidate, &cases, "--against", &serving]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let printed = text(&out);
    assert!(
        printed.contains("DIFFERS") && printed.contains("spec.replicas: 3 -> 6"),
        "{printed}"
    );
    assert!(
        printed.contains("skip "),
        "change cases are listed as not compared: {printed}"
    );

    let out = host(&["test", &serving, &cases, "--against", &serving]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(" 0 decided differently"),
        "{}",
        text(&out)
    );
}
