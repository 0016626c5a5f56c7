//! The host's container image, run the way a kubelet runs a pod, without a
//! kubelet: `scripts/build-image` builds it, `skopeo` pushes it to a real
//! registry and pulls it back by digest, `umoci` unpacks it into an OCI
//! runtime bundle, the pod template the API server stores (after
//! kustomize's `images:` pinned the digest) is turned into that bundle's
//! configuration, and `runc` (the OCI runtime containerd runs under every
//! kubelet) runs it.
//!
//! What a kubelet does that is not played here: scheduling, pulling (the
//! test pulls with skopeo), the pod's own network namespace (host
//! networking stands in for it, with a loopback address per pod: see
//! [`bundle`]), seccomp's RuntimeDefault profile (runc is given none),
//! and kube-proxy (the test writes the Service's Endpoints itself, as the
//! endpoints controller would for ready pods).

pub mod bundle;
pub mod image;
pub mod kustomize;
pub mod probes;
pub mod runtime;

use std::process::Command;

/// The programs a container test needs, with the Debian package of each.
/// (program, the argument that prints its version, package)
const TOOLS: [(&str, &str, &str); 4] = [
    ("runc", "--version", "runc"),
    ("umoci", "--version", "umoci"),
    ("skopeo", "--version", "skopeo"),
    ("ip", "-V", "iproute2"),
];

/// Why containers cannot be run here, if they cannot: a program missing,
/// or not root (runc makes cgroups and mounts; `ip` adds the pods'
/// addresses).
pub fn unavailable() -> Option<String> {
    let missing: Vec<String> = TOOLS
        .iter()
        .filter(|(tool, version, _)| {
            Command::new(tool)
                .arg(version)
                .output()
                .map(|o| !o.status.success())
                .unwrap_or(true)
        })
        .map(|(tool, _, package)| format!("{tool} (Debian package {package})"))
        .collect();
    if !missing.is_empty() {
        return Some(format!("{} not installed", missing.join(", ")));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: runc needs to make cgroups and mounts".into());
    }
    None
}
