//! `reconciler-host run` as a child process of the test.
//!
//! The real-cluster tests drive the host the way a user runs it: the
//! binary, a plugins directory, `--namespace`. Which binary: the tests
//! package builds the host's own `main.rs` as its binary
//! `reconciler-host-under-test` (see tests/Cargo.toml), which a test gets
//! through `env!("CARGO_BIN_EXE_reconciler-host-under-test")`. Cargo builds a
//! package's binaries before running its integration tests, so the host
//! under test is always built from the current source, whichever cargo
//! command ran the tests; building `-p reconciler-host` from inside a test
//! instead would select other dependency features and rebuild half the
//! dependency tree beside the workspace build.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};

/// The host's default --shutdown-timeout-secs is 25.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of the host's log a failure prints.
const LOG_TAIL_LINES: usize = 300;

/// A running `reconciler-host run`; killed if dropped while running.
pub struct HostProcess {
    child: Mutex<Child>,
    pid: u32,
    log: PathBuf,
    plugins_dir: PathBuf,
}

impl HostProcess {
    /// Starts `binary run` serving only `namespace`, with a plugins
    /// directory under `workdir` holding a copy of each of `plugins`, and
    /// its log (stdout and stderr) in `workdir/host.log`; `kubeconfig` is its
    /// KUBECONFIG (else the test's own), and `env` is added to the host's
    /// environment (e.g. `RUST_LOG`).
    ///
    /// `compile_cache` is shared by every test: entries are keyed by the
    /// plugin's content and written atomically, so parallel hosts can share
    /// it, and each host need not compile the same plugin again.
    pub(crate) fn start(
        binary: &Path,
        workdir: &Path,
        compile_cache: &Path,
        plugins: &[PathBuf],
        namespace: &str,
        kubeconfig: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let kubeconfig = kubeconfig.map(|k| k.to_string_lossy().into_owned());
        let env: Vec<(&str, &str)> = kubeconfig
            .iter()
            .map(|k| ("KUBECONFIG", k.as_str()))
            .chain(env.iter().copied())
            .collect();
        Self::start_with(
            binary,
            workdir,
            compile_cache,
            plugins,
            namespace,
            &[],
            &env,
        )
    }

    /// [`HostProcess::start`], with `args` after `run`'s own and `env` set
    /// for the host: a replica of a Deployment, say.
    pub(crate) fn start_with(
        binary: &Path,
        workdir: &Path,
        compile_cache: &Path,
        plugins: &[PathBuf],
        namespace: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        ensure!(
            binary.is_file(),
            "the host binary {} is missing (cargo builds it with the tests of reconciler-tests)",
            binary.display()
        );
        let plugins_dir = workdir.join("plugins");
        std::fs::create_dir_all(&plugins_dir)
            .with_context(|| format!("creating {}", plugins_dir.display()))?;
        for plugin in plugins {
            let name = plugin
                .file_name()
                .with_context(|| format!("{} names no file", plugin.display()))?;
            std::fs::copy(plugin, plugins_dir.join(name)).with_context(|| {
                format!(
                    "copying {} (build the plugins with scripts/build-plugins)",
                    plugin.display()
                )
            })?;
        }
        let log = workdir.join("host.log");
        let log_file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(binary)
            .arg("--compile-cache")
            .arg(compile_cache)
            .arg("run")
            .arg("--plugins-dir")
            .arg(&plugins_dir)
            .arg("--namespace")
            .arg(namespace)
            // No HTTP endpoint: tests in parallel would fight over a port,
            // and the tests look at the cluster, not at /metrics.
            .arg("--http-listen")
            .arg("off")
            // Plugin resources are cluster-scoped: each test's host follows
            // only its own test's, never a parallel test's.
            .arg("--plugin-selector")
            .arg(format!("reconciler-tests/namespace={namespace}"))
            .args(args)
            .envs(env.iter().copied())
            // Logs are searched for text; colour codes would split it.
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {} run", binary.display()))?;
        let pid = child.id();
        Ok(Self {
            child: Mutex::new(child),
            pid,
            log,
            plugins_dir,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The directory the host loads its plugins from, and watches.
    pub fn plugins_dir(&self) -> &Path {
        &self.plugins_dir
    }

    /// Puts `contents` into the plugins directory as `name` the way `cp` to
    /// a temporary name and `mv` do: the host never sees a half-written file.
    pub fn put_plugin(&self, name: &str, contents: &[u8]) -> Result<PathBuf> {
        let target = self.plugins_dir.join(name);
        let temporary = self.plugins_dir.join(format!(".{name}.tmp"));
        std::fs::write(&temporary, contents)
            .with_context(|| format!("writing {}", temporary.display()))?;
        std::fs::rename(&temporary, &target)
            .with_context(|| format!("renaming {} to {}", temporary.display(), target.display()))?;
        Ok(target)
    }

    fn child(&self) -> MutexGuard<'_, Child> {
        // A panic while holding it leaves the child as it was: still usable.
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn try_wait(&self) -> Result<Option<ExitStatus>> {
        self.child()
            .try_wait()
            .context("asking whether the host is still running")
    }

    /// How the host exited, once it has.
    pub fn exited(&self) -> Result<Option<ExitStatus>> {
        self.try_wait()
    }

    /// `Err` if the host has exited.
    pub fn ensure_running(&self) -> Result<()> {
        match self.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("the host exited unexpectedly ({status})"),
        }
    }

    /// SIGTERM, then expects exit code 0 within `SHUTDOWN_TIMEOUT`.
    pub async fn stop(&self) -> Result<()> {
        if let Some(status) = self.try_wait()? {
            bail!("the host had already exited ({status}) before it was asked to stop");
        }
        terminate(self.pid)?;
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            if let Some(status) = self.try_wait()? {
                ensure!(
                    status.success(),
                    "the host exited with {status} after SIGTERM, expected exit code 0"
                );
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                bail!(
                    "the host did not exit within {} s of SIGTERM (it was killed)",
                    SHUTDOWN_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL, as the kernel's OOM killer or a lost node would end it:
    /// no draining, no release of its Lease. Returns once it is reaped.
    pub fn sigkill(&self) -> Result<()> {
        let mut child = self.child();
        if let Some(status) = child
            .try_wait()
            .context("asking whether the host is still running")?
        {
            bail!("the host had already exited ({status}) before it was to be killed");
        }
        // std's kill is SIGKILL on Unix.
        child.kill().context("sending SIGKILL to the host")?;
        child.wait().context("waiting for the killed host")?;
        Ok(())
    }

    /// SIGSTOP: the host is frozen where it is, mid-request perhaps, as a
    /// long pause would hold it, until [`Self::thaw`].
    #[cfg(unix)]
    pub fn freeze(&self) -> Result<()> {
        self.ensure_running()?;
        send(self.pid, libc::SIGSTOP, "SIGSTOP")
    }

    /// SIGCONT: a frozen host goes on from where it stopped.
    #[cfg(unix)]
    pub fn thaw(&self) -> Result<()> {
        send(self.pid, libc::SIGCONT, "SIGCONT")
    }

    fn kill(&self) {
        let mut child = self.child();
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The whole log so far, without terminal colour codes.
    pub fn log_text(&self) -> String {
        match std::fs::read_to_string(&self.log) {
            Ok(text) => strip_ansi(&text),
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }

    /// The log lines that contain every one of `needles`.
    pub fn log_lines_with(&self, needles: &[&str]) -> Vec<String> {
        lines_with(&self.log_text(), needles)
    }

    /// The end of the log, framed for printing.
    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        let skipped = lines.len().saturating_sub(LOG_TAIL_LINES);
        let mut out = format!("----- reconciler-host log (pid {})", self.pid);
        if skipped > 0 {
            out.push_str(&format!(", last {LOG_TAIL_LINES} lines of {}", lines.len()));
        }
        out.push_str(" -----\n");
        for line in &lines[skipped..] {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("----- end of reconciler-host log -----");
        out
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// SIGTERM to `pid`, a child of this process not reaped yet (the bench's
/// controllers stop so as well).
#[cfg(unix)]
pub fn terminate(pid: u32) -> Result<()> {
    send(pid, libc::SIGTERM, "SIGTERM")
}

/// Sends `signal` (called `name` in errors) to the host.
#[cfg(unix)]
fn send(pid: u32, signal: libc::c_int, name: &str) -> Result<()> {
    let pid = libc::pid_t::try_from(pid)?;
    // SAFETY: kill(2) on our own child, which has not been reaped (the
    // caller saw it running, and only this type waits for it), so the pid
    // is still ours.
    if unsafe { libc::kill(pid, signal) } != 0 {
        bail!(
            "sending {name} to the host: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

#[cfg(not(unix))]
pub fn terminate(_pid: u32) -> Result<()> {
    bail!("stopping the host with SIGTERM needs a Unix system")
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`), in case the
/// host colours its log despite `NO_COLOR`.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The lines of `text` that contain every one of `needles`.
pub fn lines_with(text: &str, needles: &[&str]) -> Vec<String> {
    text.lines()
        .filter(|line| needles.iter().all(|n| line.contains(n)))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn strip_ansi_keeps_the_text_between_colour_codes() {
        assert_eq!(
            super::strip_ansi("\u{1b}[2m2024\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m refused"),
            "2024  WARN refused"
        );
        assert_eq!(super::strip_ansi("plain [text]"), "plain [text]");
    }
}
