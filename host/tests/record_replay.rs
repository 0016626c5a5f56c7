//! `--record DIR` writes each reconcile as a golden case, and
//! `reconciler-host test` replays it: the same plugin answers the same.

mod cli_run;

use cli_run::{host, root};

use std::path::{Path, PathBuf};

/// Replays every plugin's recorded cases; returns how many ran per plugin.
fn replay(recorded: &Path) -> Vec<(String, usize)> {
    let mut replayed = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(recorded)
        .expect("the record directory exists")
        .map(|e| e.expect("an entry").path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let plugin = dir.file_name().unwrap().to_string_lossy().to_string();
        let wasm = root()
            .join("plugins")
            .join(format!("{}.wasm", plugin.replace('-', "_")));
        let cases = std::fs::read_dir(&dir).unwrap().count();
        let out = host(&["test", wasm.to_str().unwrap(), dir.to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{plugin}: replay failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(&format!("{cases} passed, 0 failed")),
            "{plugin}: {stdout}"
        );
        replayed.push((plugin, cases));
    }
    replayed
}

#[test]
fn a_recorded_simulation_replays_as_passing_golden_cases() {
    let work = tempfile::tempdir().unwrap();
    let recorded = work.path().join("recorded");
    let out = host(&[
        "simulate",
        "--plugins-dir",
        "plugins",
        "--objects",
        "examples",
        "--advance",
        "2m",
        "--record",
        recorded.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed = replay(&recorded);
    let plugins: Vec<&str> = replayed.iter().map(|(p, _)| p.as_str()).collect();
    assert!(
        plugins.contains(&"podset") && plugins.contains(&"memcached"),
        "{replayed:?}"
    );
    // Memcached requeues itself: more than one reconcile was recorded.
    assert!(
        replayed.iter().any(|(p, n)| p == "memcached" && *n > 1),
        "{replayed:?}"
    );
}

#[test]
fn a_recorded_dev_session_replays_as_passing_golden_cases() {
    let work = tempfile::tempdir().unwrap();
    let recorded = work.path().join("recorded");
    let out = host(&[
        "dev",
        "--until-settled",
        "--record",
        recorded.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed = replay(&recorded);
    assert!(
        replayed.iter().any(|(p, n)| p == "podset" && *n >= 1),
        "{replayed:?}"
    );
}

#[test]
fn a_case_a_plugin_no_longer_answers_the_same_fails_on_replay() {
    let work = tempfile::tempdir().unwrap();
    let recorded = work.path().join("recorded");
    let out = host(&[
        "simulate",
        "--plugins-dir",
        "plugins",
        "--objects",
        "examples/podset.yaml",
        "--record",
        recorded.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = recorded.join("podset");
    let case = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // The recorded primary asked for another size than the answer it got.
    let text = std::fs::read_to_string(&case).unwrap();
    let edited = text.replacen("size: 3", "size: 4", 1);
    assert_ne!(text, edited, "the case holds the PodSet's size: {text}");
    std::fs::write(&case, edited).unwrap();
    let wasm = root().join("plugins/podset.wasm");
    let out = host(&["test", wasm.to_str().unwrap(), case.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn cases_recorded_in_member_clusters_carry_the_cluster_and_replay_in_it() {
    let work = tempfile::tempdir().unwrap();
    let recorded = work.path().join("recorded");
    let out = host(&[
        "simulate",
        "--plugins-dir",
        "plugins",
        "--objects",
        "examples/podset.yaml",
        "--crds",
        "crds",
        "--clusters",
        "2",
        "--cluster-labels",
        "member-2:region=eu",
        "--record",
        recorded.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The podset cases name their member, and what podset answered there
    // depends on it: a replay that lost the cluster would fail.
    let cases: Vec<String> = std::fs::read_dir(recorded.join("podset"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let in_member_2: Vec<&String> = cases
        .iter()
        .filter(|c| c.contains("cluster:\n  name: member-2\n"))
        .collect();
    assert!(
        !in_member_2.is_empty() && cases.iter().any(|c| c.contains("name: member-1\n")),
        "{cases:?}"
    );
    assert!(
        in_member_2
            .iter()
            .all(|c| c.contains("region: eu") && c.contains("cluster: member-2")),
        "{in_member_2:?}"
    );
    let replayed = replay(&recorded);
    assert!(
        replayed.iter().any(|(p, n)| p == "podset" && *n >= 2),
        "{replayed:?}"
    );
}
