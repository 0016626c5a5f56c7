//! A container run by `runc` from a bundle, as a kubelet's runtime runs
//! one: in the foreground of a child process whose exit status is the
//! container's, its output in a log file; signalled with `runc kill`;
//! removed, whatever happened, when dropped. And the pods' own loopback
//! addresses ([`PodAddress`]).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

pub struct Container {
    pub id: String,
    child: Mutex<Child>,
    log: PathBuf,
    _bundle: tempfile::TempDir,
}

impl Container {
    /// Starts `runc run` on `bundle`, writing its output to `log`; `keep`
    /// (the bundle's directory) is removed when the container is.
    pub fn run(id: &str, bundle: &Path, keep: tempfile::TempDir, log: &Path) -> Result<Self> {
        let out = std::fs::File::create(log)?;
        let child = Command::new("runc")
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting runc run")?;
        Ok(Self {
            id: id.to_string(),
            child: Mutex::new(child),
            log: log.to_path_buf(),
            _bundle: keep,
        })
    }

    /// What the container has written so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its log's lines that contain every one of `needles`.
    pub fn log_lines_with(&self, needles: &[&str]) -> Vec<String> {
        crate::real_cluster::host_process::lines_with(&self.log(), needles)
    }

    /// The container's first process, as the machine's PID namespace
    /// numbers it.
    pub fn pid(&self) -> Result<u32> {
        let output = Command::new("runc").args(["state", &self.id]).output()?;
        ensure!(
            output.status.success(),
            "runc state {}: {}",
            self.id,
            String::from_utf8_lossy(&output.stderr)
        );
        let state: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        let pid = state["pid"]
            .as_u64()
            .with_context(|| format!("runc state without a pid: {state}"))?;
        ensure!(pid != 0, "{} is not running: {state}", self.id);
        Ok(u32::try_from(pid)?)
    }

    /// Sends `signal` (`TERM`, `KILL`) to the container's first process.
    pub fn signal(&self, signal: &str) -> Result<()> {
        let output = Command::new("runc")
            .args(["kill", &self.id, signal])
            .output()?;
        ensure!(
            output.status.success(),
            "runc kill {} {signal}: {}",
            self.id,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }

    /// An error, with the log's last lines, if the container has exited.
    pub fn running(&self) -> Result<()> {
        let exited = self.child.lock().expect("not poisoned").try_wait()?;
        if let Some(status) = exited {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            bail!(
                "{} exited ({status}); its log ends:\n{}",
                self.id,
                lines[lines.len().saturating_sub(20)..].join("\n")
            );
        }
        Ok(())
    }

    /// Waits up to `timeout` for the container to exit; its status.
    pub fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.lock().expect("not poisoned").try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("{} still runs after {timeout:?}", self.id);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let child = self.child.get_mut().expect("not poisoned");
        if child.try_wait().ok().flatten().is_none() {
            let _ = Command::new("runc")
                .args(["kill", &self.id, "KILL"])
                .output();
            let _ = child.wait();
        }
        let _ = Command::new("runc")
            .args(["delete", "--force", &self.id])
            .output();
    }
}

/// An address of the loopback device for one pod, removed when dropped.
pub struct PodAddress(pub Ipv4Addr);

impl PodAddress {
    pub fn add(ip: Ipv4Addr) -> Result<Self> {
        let output = Command::new("ip")
            .args(["address", "add", &format!("{ip}/32"), "dev", "lo"])
            .output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(
            output.status.success() || stderr.contains("File exists"),
            "adding {ip} to lo: {stderr}"
        );
        Ok(Self(ip))
    }
}

impl Drop for PodAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["address", "del", &format!("{}/32", self.0), "dev", "lo"])
            .output();
    }
}

/// The PID the process `pid` has in its own PID namespace (the last
/// field of `NSpid`).
pub fn pid_inside(pid: u32) -> Result<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("NSpid:"))
        .context("no NSpid line")?;
    line.split_whitespace()
        .last()
        .context("an empty NSpid line")?
        .parse()
        .context("NSpid")
}
