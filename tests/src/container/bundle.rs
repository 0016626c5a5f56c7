//! A kubelet's translation of one container of a pod template into an OCI
//! runtime configuration: the image's entrypoint with the container's
//! args, its env (fieldRefs resolved), the user and group of the security
//! contexts, a read-only root, capabilities dropped, no new privileges,
//! the memory and CPU limits as cgroup limits, each volume mount bound
//! from a directory standing in for its volume, and the service account's
//! token, CA and namespace where kube's in-cluster configuration reads
//! them, with `KUBERNETES_SERVICE_HOST/PORT` naming the API server.
//!
//! Host networking stands in for the pod's network namespace, which the
//! API server on 127.0.0.1 could not be reached from. So that two pods can
//! each listen where the manifest says (`0.0.0.0:8080`, ...), every pod
//! gets an address of its own on the loopback device, and a listen
//! address `0.0.0.0:PORT` in the args becomes `POD_IP:PORT`: what
//! `0.0.0.0` means inside a pod's own network namespace.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// Where kube's in-cluster configuration reads the service account.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// One pod, as the kubelet knows it.
pub struct Pod<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub ip: Ipv4Addr,
    /// `spec.template` of the workload, as the API server stores it.
    pub template: &'a Value,
    /// The API server's port on 127.0.0.1.
    pub api_port: u16,
    /// A directory with `token`, `ca.crt` and `namespace`.
    pub service_account: &'a Path,
    /// A directory standing in for each volume, by the volume's name.
    pub volumes: &'a BTreeMap<String, PathBuf>,
}

/// An HTTP probe of the container, as the manifest declares it.
#[derive(Clone, Debug)]
pub struct HttpProbe {
    pub path: String,
    pub port: u16,
    pub period: std::time::Duration,
    pub failure_threshold: u32,
}

/// What the kubelet keeps of a container besides its runtime configuration.
#[derive(Clone, Debug)]
pub struct Kept {
    pub liveness: HttpProbe,
    pub readiness: HttpProbe,
    pub termination_grace: std::time::Duration,
    pub memory_limit_bytes: u64,
}

impl Pod<'_> {
    /// Rewrites the bundle's `config.json` (from `umoci unpack`) to run
    /// `container` of this pod.
    pub fn configure(&self, bundle: &Path, container: &str) -> Result<Kept> {
        let path = bundle.join("config.json");
        let mut config: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        let spec = &self.template["spec"];
        let c = spec["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == container)
            .with_context(|| format!("the pod template has no container {container}"))?;
        let image = ImageProcess::of(&config);
        let context = |key: &str| {
            c["securityContext"]
                .get(key)
                .or_else(|| spec["securityContext"].get(key))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let process = &mut config["process"];
        process["args"] = json!(self.args(&image, c)?);
        process["env"] = json!(self.env(&image, c)?);
        process["cwd"] = json!("/");
        process["terminal"] = json!(false);
        process["user"] = json!({
            "uid": context("runAsUser").as_u64().context("runAsUser is unset")?,
            "gid": context("runAsGroup").as_u64().context("runAsGroup is unset")?,
        });
        process["noNewPrivileges"] = json!(context("allowPrivilegeEscalation") == json!(false));
        process["capabilities"] = capabilities(&context("capabilities"))?;
        // This machine's root may not raise it; a kubelet leaves it alone too.
        process
            .as_object_mut()
            .expect("an object")
            .remove("oomScoreAdj");
        config["hostname"] = json!(self.name);
        config["root"]["readonly"] = json!(context("readOnlyRootFilesystem") == json!(true));
        let namespaces = config["linux"]["namespaces"]
            .as_array_mut()
            .context("config.json has no linux.namespaces")?;
        namespaces.retain(|n| n["type"] != "network");
        let limits = &c["resources"]["limits"];
        let memory_limit_bytes = quantity(&limits["memory"])?;
        let cpu_millis = cpu_millis(&limits["cpu"])?;
        let resources = &mut config["linux"]["resources"];
        resources["memory"] = json!({"limit": memory_limit_bytes});
        resources["cpu"] = json!({"period": 100_000, "quota": cpu_millis * 100});
        config["mounts"]
            .as_array_mut()
            .context("config.json has no mounts")?
            .extend(self.mounts(c)?);
        std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
        let port_named = |port: &Value| -> Result<u16> {
            if let Some(n) = port.as_u64() {
                return Ok(u16::try_from(n)?);
            }
            c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == *port)
                .and_then(|p| p["containerPort"].as_u64())
                .and_then(|n| u16::try_from(n).ok())
                .with_context(|| format!("no container port {port}"))
        };
        let probe = |which: &str| -> Result<HttpProbe> {
            let p = &c[which];
            Ok(HttpProbe {
                path: p["httpGet"]["path"]
                    .as_str()
                    .with_context(|| format!("{which} is not an httpGet probe"))?
                    .to_string(),
                port: port_named(&p["httpGet"]["port"])?,
                period: std::time::Duration::from_secs(p["periodSeconds"].as_u64().unwrap_or(10)),
                failure_threshold: p["failureThreshold"].as_u64().unwrap_or(3) as u32,
            })
        };
        Ok(Kept {
            liveness: probe("livenessProbe")?,
            readiness: probe("readinessProbe")?,
            termination_grace: std::time::Duration::from_secs(
                spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30),
            ),
            memory_limit_bytes,
        })
    }

    fn args(&self, image: &ImageProcess, c: &Value) -> Result<Vec<String>> {
        let (mut args, given) = if c["command"].is_array() {
            (strings(&c["command"]), strings(&c["args"]))
        } else if c["args"].is_array() {
            (image.entrypoint.clone(), strings(&c["args"]))
        } else {
            (image.entrypoint.clone(), image.cmd.clone())
        };
        args.extend(
            given
                .into_iter()
                .map(|a| a.replace("=0.0.0.0:", &format!("={}:", self.ip))),
        );
        if args.is_empty() {
            bail!("neither the container nor the image says what to run");
        }
        Ok(args)
    }

    fn env(&self, image: &ImageProcess, c: &Value) -> Result<Vec<String>> {
        let mut env = image.env.clone();
        env.push(format!("HOSTNAME={}", self.name));
        env.push("KUBERNETES_SERVICE_HOST=127.0.0.1".into());
        env.push(format!("KUBERNETES_SERVICE_PORT={}", self.api_port));
        for var in c["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().context("an env entry without name")?;
            let value = if let Some(value) = var["value"].as_str() {
                value.to_string()
            } else {
                match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.name") => self.name.to_string(),
                    Some("metadata.namespace") => self.namespace.to_string(),
                    Some("status.podIP") => self.ip.to_string(),
                    other => bail!("env {name}: a source this kubelet does not resolve: {other:?}"),
                }
            };
            env.push(format!("{name}={value}"));
        }
        Ok(env)
    }

    fn mounts(&self, c: &Value) -> Result<Vec<Value>> {
        let bind = |destination: &str, source: &Path, read_only: bool| {
            json!({
                "destination": destination,
                "type": "bind",
                "source": source,
                "options": ["rbind", if read_only { "ro" } else { "rw" }],
            })
        };
        let mut mounts = vec![bind(SERVICE_ACCOUNT_DIR, self.service_account, true)];
        for mount in c["volumeMounts"].as_array().into_iter().flatten() {
            let name = mount["name"]
                .as_str()
                .context("a volumeMount without name")?;
            let Some(source) = self.volumes.get(name) else {
                // Left out on purpose: the directory in the image's root
                // stays, as read-only as the root is.
                continue;
            };
            let destination = mount["mountPath"].as_str().context("no mountPath")?;
            mounts.push(bind(
                destination,
                source,
                mount["readOnly"].as_bool().unwrap_or(false),
            ));
        }
        Ok(mounts)
    }
}

/// What the image itself runs, as `umoci unpack` left it in the bundle's
/// `config.json`: its Entrypoint and Cmd joined into `process.args`, split
/// again here at the first element (this image's Entrypoint is the one
/// binary), and its Env.
struct ImageProcess {
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    env: Vec<String>,
}

impl ImageProcess {
    fn of(config: &Value) -> Self {
        let mut cmd = strings(&config["process"]["args"]);
        let entrypoint = cmd.drain(..1.min(cmd.len())).collect();
        Self {
            entrypoint,
            cmd,
            env: strings(&config["process"]["env"]),
        }
    }
}

/// The strings of a JSON array (none for anything else).
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn capabilities(context: &Value) -> Result<Value> {
    let dropped: Vec<&str> = context["drop"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if dropped != ["ALL"] || context["add"].is_array() {
        bail!("capabilities {context}: only `drop: [ALL]` is translated here");
    }
    Ok(json!({
        "bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": [],
    }))
}

/// A quantity as written, a string or a bare number.
fn quantity_text(value: &Value) -> Result<String> {
    value
        .as_str()
        .map(str::to_string)
        .or_else(|| value.as_u64().map(|n| n.to_string()))
        .with_context(|| format!("no quantity in {value}"))
}

/// A CPU quantity in millicores: `1` or `100m`.
fn cpu_millis(value: &Value) -> Result<u64> {
    let text = quantity_text(value)?;
    let millis = match text.strip_suffix('m') {
        Some(m) => m.parse::<u64>(),
        None => text.parse::<u64>().map(|cores| cores * 1000),
    };
    millis.with_context(|| format!("the CPU quantity {text} is not one this kubelet reads"))
}

/// A memory quantity in bytes: `768Mi`, `1Gi`, `512`.
fn quantity(value: &Value) -> Result<u64> {
    let text = quantity_text(value)?;
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let scale: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        other => bail!("the quantity {text} has a unit ({other}) this kubelet does not read"),
    };
    Ok(digits.parse::<u64>()? * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_read_as_a_kubelet_reads_them() {
        assert_eq!(quantity(&json!("768Mi")).unwrap(), 768 << 20);
        assert_eq!(quantity(&json!("1Gi")).unwrap(), 1 << 30);
        assert_eq!(quantity(&json!(512)).unwrap(), 512);
        assert!(quantity(&json!("1.5Gi")).is_err());
        assert_eq!(cpu_millis(&json!("1")).unwrap(), 1000);
        assert_eq!(cpu_millis(&json!("100m")).unwrap(), 100);
    }
}
