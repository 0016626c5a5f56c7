//! `reconciler-host dev` over several embedded member clusters, as a user
//! runs it: one directory of objects per member, every line naming its
//! cluster, and an edit reaching only the cluster whose file changed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn podset(size: u32) -> String {
    format!(
        "apiVersion: example.com/v1alpha1\nkind: PodSet\nmetadata:\n  name: web\n  namespace: default\nspec:\n  size: {size}\n"
    )
}

/// `clusters/<name>/podset.yaml` for each `(name, size)`.
fn cluster_dirs(sizes: &[(&str, u32)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, size) in sizes {
        std::fs::create_dir(dir.path().join(name)).unwrap();
        std::fs::write(dir.path().join(name).join("podset.yaml"), podset(*size)).unwrap();
    }
    dir
}

fn dev(clusters: &Path, shared: &Path, extra: &[&str]) -> Command {
    assert!(
        root().join("plugins/podset.wasm").is_file(),
        "build the plugins first: scripts/build-plugins"
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_reconciler-host"));
    command
        .current_dir(root())
        .arg("--compile-cache")
        .arg(root().join("target/test-compile-cache"))
        .args(["dev", "--plugins-dir", "plugins", "--objects"])
        .arg(shared)
        .arg("--cluster-objects")
        .arg(clusters)
        .args(extra);
    command
}

#[test]
fn each_member_converges_its_own_objects_and_every_line_names_its_cluster() {
    let clusters = cluster_dirs(&[("east", 3), ("west", 1)]);
    let shared = tempfile::tempdir().unwrap();
    let out = dev(
        clusters.path(),
        shared.path(),
        &["--until-settled", "--cluster-labels", "east:region=us-east"],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in text.lines() {
        // `HH:MM:SS <what>`: reconciles, object changes and the built-ins'
        // changes each say where.
        let stamped = line.len() > 9 && &line[2..3] == ":" && &line[5..6] == ":";
        let Some(what) = line.get(9..).filter(|_| stamped) else {
            continue;
        };
        if what.starts_with("podset ") || what.starts_with("created ") {
            panic!("a line that names no cluster: {line}\n{text}");
        }
    }
    for (cluster, size) in [("east", 3), ("west", 1)] {
        assert!(
            text.contains(&format!(
                "{cluster}: podset PodSet default/web: created Deployment default/web; status updated; event Normal Created: Deployment web with {size} replicas"
            )),
            "{text}"
        );
    }
    // The table at the end: a row per member, each told its cluster.
    let row = |cluster: &str| {
        text.lines()
            .find(|l| l.starts_with(cluster) && l.contains("PodSet"))
            .unwrap_or_else(|| panic!("no {cluster} row in:\n{text}"))
            .to_string()
    };
    assert!(row("east").contains(r#""cluster":"east""#), "{text}");
    assert!(row("west").contains(r#""cluster":"west""#), "{text}");
    assert_eq!(row("east").matches("web-").count(), 3, "{text}");
    assert_eq!(row("west").matches("web-").count(), 1, "{text}");
}

#[cfg(unix)]
#[test]
fn an_edit_reaches_only_the_cluster_whose_file_changed() {
    let clusters = cluster_dirs(&[("east", 2), ("west", 1)]);
    let shared = tempfile::tempdir().unwrap();
    let mut child = dev(clusters.path(), shared.path(), &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    // Lines seen so far count: two clusters print in either order.
    let mut wait_for = |needle: &str| {
        if seen.iter().any(|l: &String| l.contains(needle)) {
            return seen.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    seen.push(line.clone());
                    if line.contains(needle) {
                        return seen.clone();
                    }
                }
                Err(_) => panic!("no line with {needle:?}; dev printed:\n{}", seen.join("\n")),
            }
        }
    };
    wait_for("west: podset PodSet default/web: created Deployment");
    wait_for("east: podset PodSet default/web: created Deployment");

    // Written aside and renamed into place, as editors save.
    let west = clusters.path().join("west");
    std::fs::write(west.join(".podset.yaml.tmp"), podset(4)).unwrap();
    std::fs::rename(west.join(".podset.yaml.tmp"), west.join("podset.yaml")).unwrap();
    let before = wait_for("west: updated PodSet default/web").len();
    let all = wait_for("west: podset PodSet default/web: updated Deployment default/web");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        all.last()
            .unwrap()
            .contains("Deployment web from 1 to 4 replicas"),
        "{all:?}"
    );
    let after = &all[before..];
    assert!(
        after
            .iter()
            .all(|l| !(l.contains(" east: ") && (l.contains("updated") || l.contains("Scaled")))),
        "east's PodSet and Deployment were not touched: {after:?}"
    );
}
