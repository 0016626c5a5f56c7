//! The controller under test as a child process: this binary's
//! `native-controller`, the kopf PodSet operator (bench/cluster/kopf), or
//! `reconciler-host run` with podset.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::cluster::tail;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Side {
    Native,
    /// The PodSet operator written with kopf (bench/cluster/kopf).
    Kopf,
    Host,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Native => "native",
            Side::Kopf => "kopf",
            Side::Host => "host",
        })
    }
}

/// How to start the host: its binary, a plugins dir holding only podset, a
/// compile cache already holding podset.
pub struct HostSetup {
    bin: PathBuf,
    plugins_dir: PathBuf,
    compile_cache: PathBuf,
    extra_args: Vec<String>,
    /// The `cgroup.procs` of each cgroup the host is started in.
    cgroup_procs: Vec<PathBuf>,
}

impl HostSetup {
    /// Copies `plugin` into a plugins dir of its own under `work` and
    /// compiles it into a compile cache there (`reconciler-host inspect`
    /// loads through the cache), so that `run` loads it from the cache as a
    /// restarted host would.
    pub fn prepare(
        bin: PathBuf,
        plugin: &Path,
        candidate: Option<&Path>,
        work: &Path,
        extra_args: Vec<String>,
    ) -> anyhow::Result<Self> {
        if !bin.is_file() {
            bail!(
                "no host binary at {} (build it with `cargo build --release -p reconciler-host`, or give --host-bin)",
                bin.display()
            );
        }
        let plugins_dir = work.join("plugins");
        let compile_cache = work.join("compile-cache");
        std::fs::create_dir_all(&plugins_dir)?;
        std::fs::create_dir_all(&compile_cache)?;
        std::fs::copy(plugin, plugins_dir.join("podset.wasm")).with_context(|| {
            format!(
                "copying {} (build the plugins with scripts/build-plugins, or give --plugin)",
                plugin.display()
            )
        })?;
        if let Some(candidate) = candidate {
            std::fs::copy(candidate, plugins_dir.join("podset.candidate.wasm"))
                .with_context(|| format!("copying the candidate {}", candidate.display()))?;
        }
        let mut inspect = Command::new(&bin);
        inspect.arg("inspect").arg(plugins_dir.join("podset.wasm"));
        if candidate.is_some() {
            inspect.arg(plugins_dir.join("podset.candidate.wasm"));
        }
        let out = inspect
            .arg("--compile-cache")
            .arg(&compile_cache)
            .output()
            .with_context(|| format!("running {} inspect", bin.display()))?;
        if !out.status.success() {
            bail!(
                "{} inspect {} failed: {}",
                bin.display(),
                plugin.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if std::fs::read_dir(&compile_cache)?.next().is_none() {
            bail!(
                "warming the compile cache left {} empty: the host would compile podset at start",
                compile_cache.display()
            );
        }
        Ok(HostSetup {
            bin,
            plugins_dir,
            compile_cache,
            extra_args,
            cgroup_procs: Vec::new(),
        })
    }
}

impl HostSetup {
    /// The same host with `more` flags for `run` after the others.
    pub fn with_more_args(&self, more: &[&str]) -> Self {
        HostSetup {
            bin: self.bin.clone(),
            plugins_dir: self.plugins_dir.clone(),
            compile_cache: self.compile_cache.clone(),
            extra_args: self
                .extra_args
                .iter()
                .cloned()
                .chain(more.iter().map(|a| a.to_string()))
                .collect(),
            cgroup_procs: self.cgroup_procs.clone(),
        }
    }

    /// Started in the cgroup whose `cgroup.procs` is `procs` too.
    pub fn in_cgroup(mut self, procs: PathBuf) -> Self {
        self.cgroup_procs.push(procs);
        self
    }
}

/// How to start the kopf operator: kopf's executable (in a virtualenv with
/// bench/cluster/kopf/requirements.txt) and the operator's module.
pub struct KopfSetup {
    pub kopf: PathBuf,
    pub operator: PathBuf,
}

impl KopfSetup {
    pub fn check(venv: &Path, operator: &Path) -> anyhow::Result<Self> {
        let kopf = venv.join("bin/kopf");
        if !kopf.is_file() {
            bail!(
                "no kopf at {} (scripts/bench-cluster --baseline kopf installs bench/cluster/kopf/requirements.txt there; or give --kopf-venv)",
                kopf.display()
            );
        }
        if !operator.is_file() {
            bail!("no kopf operator at {}", operator.display());
        }
        Ok(KopfSetup {
            kopf,
            operator: operator.to_path_buf(),
        })
    }
}

/// A running controller; dropping it kills it.
pub struct ControllerProcess {
    child: Child,
    log: PathBuf,
    side: Side,
    /// Where the host serves /metrics (none for the other sides).
    metrics: Option<String>,
}

impl ControllerProcess {
    /// Starts `side`'s controller with `kubeconfig`, its output in `log`.
    pub fn start(
        side: Side,
        host: Option<&HostSetup>,
        kopf: Option<&KopfSetup>,
        kubeconfig: &Path,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let mut metrics = None;
        let mut cmd = match side {
            Side::Native => {
                let mut cmd = Command::new(std::env::current_exe()?);
                cmd.arg("native-controller");
                cmd
            }
            Side::Kopf => {
                let kopf = kopf.context("the kopf side needs kopf installed")?;
                let mut cmd = Command::new(&kopf.kopf);
                // One operator, every namespace, no peering with others;
                // warnings and errors logged, as the host logs by default.
                cmd.arg("run")
                    .arg("--quiet")
                    .arg("--standalone")
                    .arg("--all-namespaces")
                    .arg(&kopf.operator);
                cmd
            }
            Side::Host => {
                let host = host.context("the host side needs a prepared host")?;
                let mut cmd = if host.cgroup_procs.is_empty() {
                    Command::new(&host.bin)
                } else {
                    // The shell joins the cgroups and execs the host, so
                    // the host's first byte and cycle are charged to them.
                    let mut cmd = Command::new("sh");
                    cmd.arg("-c")
                        .arg(
                            "for p in $RECONCILER_BENCH_CGROUPS; do echo $$ > \"$p\" || exit 125; done; exec \"$0\" \"$@\"",
                        )
                        .env(
                            "RECONCILER_BENCH_CGROUPS",
                            host.cgroup_procs
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(" "),
                        )
                        .arg(&host.bin);
                    cmd
                };
                cmd.arg("run")
                    .arg("--plugins-dir")
                    .arg(&host.plugins_dir)
                    .arg("--compile-cache")
                    .arg(&host.compile_cache);
                // Beside other engineers' hosts on the same machine: not the
                // default 127.0.0.1:8080.
                if !host
                    .extra_args
                    .iter()
                    .any(|a| a.starts_with("--http-listen"))
                {
                    let port = reconciler_tests::free_loopback_port()?;
                    cmd.arg("--http-listen").arg(format!("127.0.0.1:{port}"));
                }
                // Loopback only, for whoever runs the bench: no token needed.
                if !host
                    .extra_args
                    .iter()
                    .any(|a| a.starts_with("--metrics-listen"))
                {
                    let port = reconciler_tests::free_loopback_port()?;
                    eprintln!("  host metrics: http://127.0.0.1:{port}/metrics");
                    metrics = Some(format!("127.0.0.1:{port}"));
                    cmd.arg("--metrics-listen")
                        .arg(format!("127.0.0.1:{port}"))
                        .arg("--metrics-insecure");
                }
                cmd.args(&host.extra_args);
                cmd
            }
        };
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting the {side} controller ({cmd:?})"))?;
        Ok(ControllerProcess {
            child,
            log,
            side,
            metrics,
        })
    }

    /// Where the host serves /metrics; none for the other sides.
    pub fn metrics_address(&self) -> Option<String> {
        self.metrics.clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error with the end of its log if the controller has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "the {} controller exited ({status}); the end of {}:\n{}",
                self.side,
                self.log.display(),
                tail(&self.log, 30)
            );
        }
        Ok(())
    }
}

impl ControllerProcess {
    /// Stops it as a kubelet does: SIGTERM, then SIGKILL after `grace`. A
    /// replica stopped so deletes its Lease, so the next side's ring does
    /// not wait for it to expire.
    pub fn terminate(&mut self, grace: Duration) -> anyhow::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        reconciler_tests::real_cluster::host_process::terminate(self.child.id())
            .with_context(|| format!("stopping the {} controller", self.side))?;
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        bail!(
            "the {} controller did not exit within {} s of SIGTERM (killed)",
            self.side,
            grace.as_secs()
        )
    }
}

impl ControllerProcess {
    /// SIGKILL, and waits for it: a replica lost without a word.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reconciles a host has run so far (every plugin, every result), from
/// its /metrics at `address`.
pub fn reconciles_at(address: &str) -> anyhow::Result<u64> {
    let response = reconciler_tests::metrics_text(address)
        .with_context(|| format!("reading the host's /metrics on {address}"))?;
    Ok(response
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}
