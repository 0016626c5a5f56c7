//! `reconciler-host test PLUGIN CASES...`: directories and single case files
//! together, each case run once, in the order given.

mod cli_run;

use cli_run::{host, root};

const PLUGIN: &str = "plugins/kubernetescluster.wasm";
const CASES: &str = "plugins/kubernetescluster/cases";

/// The cases a run printed a line for, in order.
fn ran(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok     "))
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn several_case_paths_run_each_case_once_in_the_order_given() {
    let in_dir = std::fs::read_dir(root().join(CASES)).unwrap().count();
    let file = format!("{CASES}/job-failed.yaml");
    let out = host(&["test", PLUGIN, &file, CASES]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("running {} cases from 2 paths", in_dir + 1)),
        "{stdout}"
    );
    let names = ran(&stdout);
    assert_eq!(names.len(), in_dir + 1, "{stdout}");
    assert_eq!(names[0], "job-failed", "the file first, as given: {stdout}");
    assert!(
        names[1..].windows(2).all(|w| w[0] < w[1]),
        "then the directory by name: {names:?}"
    );
    assert!(stdout.contains(&format!("{} passed, 0 failed", in_dir + 1)));
}

#[test]
fn a_case_path_that_does_not_exist_is_named_and_nothing_runs() {
    let out = host(&[
        "test",
        PLUGIN,
        &format!("{CASES}/job-failed.yaml"),
        "plugins/kubernetescluster/no-such-cases",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no-such-cases"), "{stderr}");
    assert!(ran(&String::from_utf8_lossy(&out.stdout)).is_empty());
}
