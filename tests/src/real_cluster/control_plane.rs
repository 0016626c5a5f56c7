//! A Kubernetes control plane of the test's own, from `../shared/kube`.
//!
//! A test that kills the API server or compacts etcd would pull the cluster
//! from under every other test sharing it, so such a test starts a control
//! plane of its own: `kube up` with a fresh state directory (about 8 s on 2
//! cores), and `kube down` at the end, also when the test fails (or on drop).
//! Only `../shared/kube` offers that, so without it these tests are skipped,
//! whatever `KUBECONFIG` says.
//!
//! Processes are found by the pids `kube` records in the state directory and
//! checked to run that state directory's binaries before a signal is sent,
//! as `kube` itself does: nothing is killed by name.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};

/// The script, relative to the workspace root (shared/ lies beside the
/// project, as in CI).
const KUBE_SCRIPT: &str = "../shared/kube/kube";
/// `kube`'s settings, which a developer's shell may have exported: each is
/// set or cleared explicitly, so the test's cluster is the one it asked for.
const KUBE_SETTINGS: &[&str] = &[
    "RESET",
    "WITH_KCM",
    "APISERVER_EXTRA",
    "KCM_EXTRA",
    "ETCD_EXTRA",
    "KCM_QPS",
    "KCM_BURST",
    "ETCD_FSYNC",
];
/// A killed process is gone within milliseconds; the margin is for a
/// loaded machine.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `kube` script beside the project, if it is there.
pub fn kube_script() -> Option<PathBuf> {
    let script = crate::root().join(KUBE_SCRIPT);
    script.is_file().then_some(script)
}

/// Why a test with a control plane of its own does not run here, or `None`
/// if it does. `KUBECONFIG` plays no part: the test makes its own.
pub fn own_control_plane_skip_reason() -> Option<String> {
    let mut missing = Vec::new();
    match std::env::var_os("RECONCILER_E2E") {
        Some(v) if v == "1" => {}
        Some(v) => missing.push(format!("RECONCILER_E2E is {v:?}, not \"1\"")),
        None => missing.push("RECONCILER_E2E is not set".to_string()),
    }
    if kube_script().is_none() {
        missing.push(format!(
            "{} is absent (this test starts, kills and compacts a control plane of its own, \
             which only that script provides)",
            crate::root().join(KUBE_SCRIPT).display()
        ));
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

/// One control plane, in a temporary state directory, stopped on drop.
pub struct OwnControlPlane {
    script: PathBuf,
    state: tempfile::TempDir,
    /// `kube`'s settings for this cluster, the same on every `up`: another
    /// value would make `up` restart the whole cluster.
    settings: Vec<(&'static str, String)>,
    kubeconfig: PathBuf,
    stopped: bool,
}

impl OwnControlPlane {
    /// `kube up` in a fresh state directory, with `settings` (e.g.
    /// `("APISERVER_EXTRA", "--watch-cache=false")`); `kube`'s other
    /// settings are cleared.
    pub fn up(settings: &[(&'static str, &str)]) -> Result<Self> {
        let script = kube_script()
            .with_context(|| format!("{} is missing", crate::root().join(KUBE_SCRIPT).display()))?;
        let state = tempfile::Builder::new()
            .prefix("reconciler-e2e-kube.")
            .tempdir()
            .context("creating a state directory for the test's control plane")?;
        let kubeconfig = state.path().join("kubeconfig");
        let plane = Self {
            script,
            state,
            settings: settings
                .iter()
                .map(|(name, value)| (*name, value.to_string()))
                .collect(),
            kubeconfig,
            stopped: false,
        };
        plane.kube("up")?;
        ensure!(
            plane.kubeconfig.is_file(),
            "kube up succeeded but wrote no {}",
            plane.kubeconfig.display()
        );
        Ok(plane)
    }

    /// The admin kubeconfig of this cluster.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The state directory (`run/*.log` has the components' logs).
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// Runs `kube <command>` for this cluster; its stdout, or an error with
    /// the end of what it said.
    fn kube(&self, command: &str) -> Result<String> {
        let mut kube = Command::new(&self.script);
        kube.arg(command)
            .env("RECONCILER_KUBE_DIR", self.state.path())
            .stdin(Stdio::null());
        for name in KUBE_SETTINGS {
            kube.env_remove(name);
        }
        for (name, value) in &self.settings {
            kube.env(name, value);
        }
        let output = kube
            .output()
            .with_context(|| format!("running {} {command}", self.script.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "{} {command} (RECONCILER_KUBE_DIR={}) failed ({}):\n{}",
                self.script.display(),
                self.state.path().display(),
                output.status,
                tail.join("\n")
            );
        }
        Ok(stdout)
    }

    /// `kube up` again: a cluster with a component that died is started
    /// again (all of it, on the same ports when they are free), keeping
    /// etcd's data.
    pub fn up_again(&self) -> Result<()> {
        self.kube("up").map(drop)
    }

    /// `kube down`, once; what went wrong if it failed.
    pub fn down(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        self.kube("down").map(drop)
    }

    /// The pid `kube` recorded for `component` (etcd, kube-apiserver,
    /// kube-controller-manager), if that process still runs this state
    /// directory's binary.
    pub fn pid(&self, component: &str) -> Result<Option<u32>> {
        let file = self
            .state
            .path()
            .join("run")
            .join(format!("{component}.pid"));
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
        };
        let pid: u32 = text
            .trim()
            .parse()
            .with_context(|| format!("{} holds no pid: {text:?}", file.display()))?;
        Ok(self.runs_our_binary(pid, component).then_some(pid))
    }

    fn runs_our_binary(&self, pid: u32, component: &str) -> bool {
        let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
            return false;
        };
        let exe = exe.to_string_lossy();
        let exe = exe.trim_end_matches(" (deleted)");
        let bins = self.state.path().join("bin");
        Path::new(exe).file_name().is_some_and(|n| n == component)
            && Path::new(exe).starts_with(&bins)
    }

    /// SIGKILL to `component`, then waits until it is gone: a crash, with
    /// no chance to close connections cleanly.
    pub fn kill(&self, component: &str) -> Result<()> {
        let pid = self
            .pid(component)?
            .with_context(|| format!("{component} of the test's control plane is not running"))?;
        send_kill(pid).with_context(|| format!("killing {component} (pid {pid})"))?;
        let deadline = Instant::now() + EXIT_TIMEOUT;
        while self.runs_our_binary(pid, component) {
            ensure!(
                Instant::now() < deadline,
                "{component} (pid {pid}) still runs {} s after SIGKILL",
                EXIT_TIMEOUT.as_secs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn port(&self, component: &str) -> Result<u16> {
        let file = self
            .state
            .path()
            .join("run")
            .join(format!("{component}.port"));
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} holds no port: {text:?}", file.display()))
    }

    /// Where the API server listens (it keeps its port across `up_again`
    /// when the port is still free, but need not).
    pub fn api_server_address(&self) -> Result<SocketAddr> {
        Ok(SocketAddr::from((
            [127, 0, 0, 1],
            self.port("kube-apiserver")?,
        )))
    }

    /// A request to etcd's JSON gateway (the v3 API over HTTP); `kube`
    /// needs curl, so it is there.
    fn etcd(&self, path: &str, body: &Value) -> Result<Value> {
        let url = format!("http://127.0.0.1:{}{path}", self.port("etcd")?);
        let output = Command::new("curl")
            .args(["-sS", "--noproxy", "*", "--max-time", "30", "-X", "POST"])
            .arg(&url)
            .arg("-d")
            .arg(body.to_string())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running curl {url}"))?;
        ensure!(
            output.status.success(),
            "curl {url} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let answer: Value = serde_json::from_slice(&output.stdout).with_context(|| {
            format!(
                "etcd answered {url} with no JSON: {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })?;
        if let Some(error) = answer.get("error") {
            bail!("etcd refused {url} {body}: {error}");
        }
        Ok(answer)
    }

    /// etcd's current revision: the resourceVersion of the newest write, of
    /// any object.
    pub fn etcd_revision(&self) -> Result<u64> {
        // Any range answers with the store's revision in its header.
        let answer = self.etcd("/v3/kv/range", &json!({"key": "AA==", "limit": 1}))?;
        let revision = &answer["header"]["revision"];
        revision
            .as_str()
            .and_then(|r| r.parse().ok())
            .or_else(|| revision.as_u64())
            .with_context(|| format!("etcd's answer has no header.revision: {answer}"))
    }

    /// Compacts etcd's history up to `revision`: a watch resuming from an
    /// older resourceVersion is then answered 410 Gone (unless the API
    /// server's watch cache still holds it). Waits until it is done.
    pub fn compact_etcd(&self, revision: u64) -> Result<()> {
        self.etcd(
            "/v3/kv/compaction",
            &json!({"revision": revision.to_string(), "physical": true}),
        )
        .map(drop)
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        if let Err(e) = self.down() {
            eprintln!("{e:#}");
        }
    }
}

#[cfg(unix)]
fn send_kill(pid: u32) -> Result<()> {
    let pid = libc::pid_t::try_from(pid)?;
    // SAFETY: kill(2) with a pid just checked (through /proc/PID/exe) to run
    // this state directory's binary, so it is not some other process.
    if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
        bail!("{}", std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(unix))]
fn send_kill(_pid: u32) -> Result<()> {
    bail!("killing a process needs a Unix system")
}

/// The API server flags of an audit log in `dir` (`audit.log`) kept by the
/// policy `rules` (YAML list items), after which nothing else is kept;
/// writes the policy file there too.
pub fn audit_log_flags(dir: &Path, rules: &str) -> Result<String> {
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n{rules}- level: None\n"
        ),
    )
    .with_context(|| format!("writing {}", policy.display()))?;
    Ok(format!(
        "--audit-policy-file={} --audit-log-path={}",
        policy.display(),
        dir.join("audit.log").display()
    ))
}
