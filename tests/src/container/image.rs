//! The image's way from the repository to a runtime bundle: built by
//! `scripts/build-image`, pushed with `skopeo` as the README says, pulled
//! back by the digest the pod template names, unpacked by `umoci`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::root;

/// An image `scripts/build-image` wrote.
pub struct BuiltImage {
    /// The OCI layout directory (tag `dev`).
    pub layout: PathBuf,
    /// The layout as one tarball: what the README pushes.
    pub tarball: PathBuf,
    /// The manifest's digest, `sha256:...`.
    pub digest: String,
}

/// Builds the image of `binary` into `out`.
pub fn build(binary: &Path, out: &Path) -> Result<BuiltImage> {
    run(Command::new(root().join("scripts/build-image"))
        .arg("--binary")
        .arg(binary)
        .arg("--out")
        .arg(out))
    .context("scripts/build-image")?;
    let digest = std::fs::read_to_string(out.join("digest"))
        .context("scripts/build-image wrote no digest")?
        .trim()
        .to_string();
    Ok(BuiltImage {
        layout: out.join("oci"),
        tarball: out.join("reconciler-host.oci.tar"),
        digest,
    })
}

/// Pushes `image`'s tarball to `destination` (`HOST/REPO:TAG`) over plain
/// HTTP, keeping its digest; returns the digest the registry stored.
pub fn push(image: &BuiltImage, destination: &str, work: &Path) -> Result<String> {
    let digest_file = work.join("pushed-digest");
    run(Command::new("skopeo")
        .args([
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            "--preserve-digests",
        ])
        .arg("--digestfile")
        .arg(&digest_file)
        .arg(format!("oci-archive:{}", image.tarball.display()))
        .arg(format!("docker://{destination}")))
    .context("skopeo copy to the registry")?;
    let pushed = std::fs::read_to_string(&digest_file)?.trim().to_string();
    ensure!(
        pushed == image.digest,
        "the registry stored {pushed}, not the built {}",
        image.digest
    );
    Ok(pushed)
}

/// What a kubelet's image pull and a runtime's unpacking do: `reference`
/// (`HOST/REPO@sha256:...`, plain HTTP) pulled, then unpacked into a new
/// runtime bundle at `bundle` (`config.json` and `rootfs/`).
pub fn pull_and_unpack(reference: &str, work: &Path, bundle: &Path) -> Result<()> {
    let layout = work.join("pulled");
    if !layout.exists() {
        run(Command::new("skopeo")
            .args(["copy", "--quiet", "--src-tls-verify=false"])
            .arg(format!("docker://{reference}"))
            .arg(format!("oci:{}:pulled", layout.display())))
        .with_context(|| format!("pulling {reference}"))?;
    }
    run(Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:pulled", layout.display()))
        .arg(bundle))
    .context("umoci unpack")
}

fn run(command: &mut Command) -> Result<()> {
    let output = command
        .output()
        .with_context(|| format!("starting {command:?}"))?;
    ensure!(
        output.status.success(),
        "{command:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}
