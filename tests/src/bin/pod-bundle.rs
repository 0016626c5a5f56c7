//! Turns a runtime bundle that `umoci unpack` made from the host's image
//! into the container a Deployment's pod template describes, as the
//! container test does (tests/src/container/bundle.rs), so the image can be
//! run by hand with `runc` (BENCHMARKS.md measures its idle RSS so).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use reconciler_tests::container::bundle::Pod;

/// Configure BUNDLE (from `umoci unpack`) to run a container of a
/// Deployment's pod template: args, env, user, read-only root, dropped
/// capabilities, memory and CPU limits, volumes, and the service account
/// where kube's in-cluster configuration reads it. Host networking stands
/// in for the pod's network: `0.0.0.0` listen addresses become --pod-ip,
/// which must be an address of this machine (`ip address add IP/32 dev lo`).
#[derive(Parser)]
struct Args {
    /// The bundle directory: config.json and rootfs/.
    bundle: PathBuf,
    /// A file holding the Deployment (deploy/deployment.yaml, or its
    /// rendering by `kubectl kustomize deploy/`).
    #[arg(long, default_value = "deploy/deployment.yaml")]
    deployment: PathBuf,
    /// The container of the pod template to run.
    #[arg(long, default_value = "host")]
    container: String,
    /// The API server's port on 127.0.0.1.
    #[arg(long)]
    api_port: u16,
    /// A directory with `token`, `ca.crt` and `namespace`, readable by the
    /// container's user.
    #[arg(long)]
    service_account: PathBuf,
    /// NAME=DIR: the directory standing in for volume NAME; a volume not
    /// given is left out, so its mount path stays on the image's root.
    #[arg(long = "volume", value_parser = parse_volume)]
    volumes: Vec<(String, PathBuf)>,
    #[arg(long, default_value = "reconciler-host-0")]
    pod_name: String,
    #[arg(long, default_value = "127.0.0.1")]
    pod_ip: Ipv4Addr,
    /// Arguments to run the host with instead of the template's (after --).
    #[arg(last = true)]
    host_args: Vec<String>,
}

fn parse_volume(text: &str) -> Result<(String, PathBuf), String> {
    let (name, dir) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: not NAME=DIR"))?;
    Ok((name.to_string(), PathBuf::from(dir)))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.deployment)
        .with_context(|| format!("reading {}", args.deployment.display()))?;
    let mut deployment: serde_json::Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("parsing {}", args.deployment.display()))?;
    if !args.host_args.is_empty() {
        let containers = deployment
            .pointer_mut("/spec/template/spec/containers")
            .and_then(serde_json::Value::as_array_mut)
            .context("the Deployment has no containers")?;
        for container in containers
            .iter_mut()
            .filter(|c| c["name"] == *args.container)
        {
            container["args"] = serde_json::json!(args.host_args);
        }
    }
    let namespace = deployment["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let volumes: BTreeMap<String, PathBuf> = args.volumes.into_iter().collect();
    let kept = Pod {
        name: &args.pod_name,
        namespace,
        ip: args.pod_ip,
        template: &deployment["spec"]["template"],
        api_port: args.api_port,
        service_account: &args.service_account,
        volumes: &volumes,
    }
    .configure(&args.bundle, &args.container)?;
    println!(
        "{}: configured; liveness GET {}:{}{}, readiness GET {}:{}{}, memory limit {} MiB, grace {:?}",
        args.bundle.display(),
        args.pod_ip,
        kept.liveness.port,
        kept.liveness.path,
        args.pod_ip,
        kept.readiness.port,
        kept.readiness.path,
        kept.memory_limit_bytes >> 20,
        kept.termination_grace,
    );
    Ok(())
}
