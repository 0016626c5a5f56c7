//! The host's container image, as `scripts/build-image` makes it: the same
//! inputs give the same digest, the one layer holds every library the
//! binary loads (a base image missing one is what breaks a container that
//! never ran), files are owned by root and stamped with the given time, the
//! image runs as the non-root user `deploy/deployment.yaml` asks for, and
//! `deploy/Dockerfile` assembles its image with the same script, so the two
//! hold the same files.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use reconciler_tests::root;
use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_reconciler-host-under-test");

/// Builds the image of BINARY into `out`, with a fixed time.
fn build(out: &Path) {
    let status = Command::new(root().join("scripts/build-image"))
        .args(["--binary", BINARY, "--out"])
        .arg(out)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .status()
        .expect("running scripts/build-image");
    assert!(status.success(), "scripts/build-image failed");
}

fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    std::fs::read(layout.join("blobs/sha256").join(hex)).expect("a blob the index names")
}

fn json_blob(layout: &Path, digest: &str) -> Value {
    serde_json::from_slice(&blob(layout, digest)).expect("a JSON blob")
}

/// Each entry of the layer: path -> (mode, uid, gid, mtime).
fn layer_entries(layout: &Path, digest: &str) -> BTreeMap<PathBuf, (u32, u64, u64, u64)> {
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(&blob(layout, digest)[..])
        .read_to_end(&mut unpacked)
        .expect("a gzip layer");
    let mut entries = BTreeMap::new();
    for entry in tar::Archive::new(&unpacked[..]).entries().unwrap() {
        let entry = entry.unwrap();
        let header = entry.header();
        entries.insert(
            entry.path().unwrap().into_owned(),
            (
                header.mode().unwrap(),
                header.uid().unwrap(),
                header.gid().unwrap(),
                header.mtime().unwrap(),
            ),
        );
    }
    entries
}

/// The libraries BINARY loads, as `ldd` names them.
fn loaded_libraries() -> Vec<PathBuf> {
    let out = Command::new("ldd")
        .arg(BINARY)
        .output()
        .expect("running ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

#[test]
fn the_image_is_reproducible_self_contained_and_runs_as_the_manifest_says() {
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    build(first.path());
    build(second.path());
    let digest = std::fs::read_to_string(first.path().join("digest")).unwrap();
    assert_eq!(
        digest,
        std::fs::read_to_string(second.path().join("digest")).unwrap(),
        "two builds of the same binary gave two digests"
    );
    assert_eq!(
        std::fs::read(first.path().join("reconciler-host.oci.tar")).unwrap(),
        std::fs::read(second.path().join("reconciler-host.oci.tar")).unwrap(),
        "two builds gave two tarballs"
    );

    let layout = first.path().join("oci");
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let manifest_digest = index["manifests"][0]["digest"].as_str().unwrap();
    assert_eq!(manifest_digest, digest.trim());
    let manifest = json_blob(&layout, manifest_digest);
    let config = json_blob(&layout, manifest["config"]["digest"].as_str().unwrap());
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    let entries = layer_entries(&layout, layers[0]["digest"].as_str().unwrap());

    // Every library the binary loads, the loader included, and what TLS
    // and the non-root user need.
    let libraries = loaded_libraries();
    assert!(
        libraries
            .iter()
            .any(|l| l.to_string_lossy().contains("libc.so")),
        "ldd lists no libc: {libraries:?}"
    );
    for wanted in libraries
        .iter()
        .map(|l| l.strip_prefix("/").unwrap().to_path_buf())
        .chain(
            [
                "usr/local/bin/reconciler-host",
                "etc/ssl/certs/ca-certificates.crt",
                "etc/passwd",
                "etc/group",
            ]
            .map(PathBuf::from),
        )
    {
        assert!(
            entries.contains_key(&wanted),
            "the image lacks /{}",
            wanted.display()
        );
    }
    for (path, (mode, uid, gid, mtime)) in &entries {
        assert_eq!(
            (*uid, *gid, *mtime),
            (0, 0, 1_700_000_000),
            "{}",
            path.display()
        );
        assert!(
            *mode == 0o755 || *mode == 0o644,
            "{} has mode {mode:o}",
            path.display()
        );
    }
    assert_eq!(entries[Path::new("usr/local/bin/reconciler-host")].0, 0o755);

    // As deploy/deployment.yaml runs it: uid and gid 65532.
    let deployment = std::fs::read_to_string(root().join("deploy/deployment.yaml")).unwrap();
    assert!(deployment.contains("runAsUser: 65532") && deployment.contains("runAsGroup: 65532"));
    assert_eq!(config["config"]["User"], "65532:65532", "{config}");
    assert_eq!(
        config["config"]["Entrypoint"][0],
        "/usr/local/bin/reconciler-host"
    );
    assert_eq!(config["created"], "2023-11-14T22:13:20Z");

    // deploy/Dockerfile's image is the same root filesystem, made by the
    // same script, with the same user, entrypoint and arguments.
    let dockerfile = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(
            "scripts/build-image --binary target/release/reconciler-host --rootfs /rootfs"
        ),
        "deploy/Dockerfile does not assemble its root filesystem with scripts/build-image"
    );
    let final_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    assert!(final_stage.starts_with("scratch"), "{final_stage}");
    assert!(
        final_stage.contains("COPY --from=build /rootfs /"),
        "{final_stage}"
    );
    let quoted = |key: &str| {
        serde_json::to_string(&config["config"][key])
            .unwrap()
            .replace(',', ", ")
    };
    assert!(final_stage.contains("USER 65532:65532"), "{final_stage}");
    assert!(
        final_stage.contains(&format!("ENTRYPOINT {}", quoted("Entrypoint"))),
        "{final_stage}"
    );
    assert!(
        final_stage.contains(&format!("CMD {}", quoted("Cmd"))),
        "{final_stage}"
    );
}
