//! The cluster a side runs on: a control plane of the bench's own from
//! ../shared/kube (reset for every side, with an audit log of the
//! controller's requests), or the cluster KUBECONFIG names.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// The controller's user on the bench's own cluster: its client
/// certificate's CN, and (with the replicas', `<user>-<i>`) the only users
/// the audit policy logs.
pub const CONTROLLER_USER: &str = "reconciler-bench-controller";

/// How many replicas (`bench-cluster replicas`) the audit policy names.
pub const REPLICA_USERS: usize = 8;

/// Only the controllers' requests, without their bodies; RequestReceived is
/// dropped so that each request is counted once, at ResponseComplete.
fn audit_policy() -> String {
    let users: Vec<String> = std::iter::once(CONTROLLER_USER.to_string())
        .chain((0..REPLICA_USERS).map(|i| format!("{CONTROLLER_USER}-{i}")))
        .map(|u| format!("{u:?}"))
        .collect();
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [\"RequestReceived\"]\nrules:\n  - level: Metadata\n    users: [{}]\n  - level: None\n",
        users.join(", ")
    )
}

/// What a side gets to run on.
pub struct Target {
    /// For the driver (creates, watches).
    pub admin_kubeconfig: PathBuf,
    /// For the controller under test.
    pub controller_kubeconfig: PathBuf,
    /// `None` when the bench did not start the API server.
    pub apiserver_pid: Option<u32>,
    /// `None` when the bench did not start the API server.
    pub audit_log: Option<PathBuf>,
}

pub enum Cluster {
    /// ../shared/kube with a state dir of the bench's own.
    Local(LocalKube),
    /// The cluster of this kubeconfig; the driver cleans up between sides.
    External(PathBuf),
}

impl Cluster {
    /// A cluster for the next side: reset and started again when local.
    pub fn fresh(&mut self) -> anyhow::Result<Target> {
        match self {
            Cluster::Local(kube) => kube.fresh(),
            Cluster::External(kubeconfig) => Ok(Target {
                admin_kubeconfig: kubeconfig.clone(),
                controller_kubeconfig: kubeconfig.clone(),
                apiserver_pid: None,
                audit_log: None,
            }),
        }
    }
}

/// ../shared/kube's `kube` script on a state dir of the bench's own. Dropping
/// it stops the cluster and removes the state dir (unless kept), also when
/// the run fails or is interrupted.
pub struct LocalKube {
    script: PathBuf,
    state: PathBuf,
    keep_state: bool,
    /// Whether `kube down` may be needed.
    started: bool,
    /// Whether `up` starts kube-controller-manager (no ReplicaSets or Pods
    /// without it: a Deployment is one object).
    controller_manager: bool,
}

impl LocalKube {
    pub fn new(script: PathBuf, state: PathBuf, keep_state: bool) -> anyhow::Result<Self> {
        // APISERVER_EXTRA is split at whitespace by the kube script.
        if state
            .to_str()
            .is_none_or(|s| s.contains(char::is_whitespace))
        {
            bail!(
                "the state dir {} is not UTF-8 or contains whitespace, which the kube script cannot pass to kube-apiserver; choose another with --state-dir",
                state.display()
            );
        }
        std::fs::create_dir_all(&state)
            .with_context(|| format!("creating the state dir {}", state.display()))?;
        std::fs::write(state.join("audit-policy.yaml"), audit_policy())?;
        Ok(LocalKube {
            script,
            state,
            keep_state,
            started: false,
            controller_manager: true,
        })
    }

    /// Clusters started from now on run no kube-controller-manager, so the
    /// objects a bench creates and the controller's Deployments are all the
    /// objects there are.
    pub fn without_controller_manager(mut self) -> Self {
        self.controller_manager = false;
        self
    }

    fn kube(&self, command: &str) -> Command {
        let mut cmd = Command::new(&self.script);
        cmd.arg(command)
            .env("RECONCILER_KUBE_DIR", self.state.join("kube"));
        cmd
    }

    fn audit_log(&self) -> PathBuf {
        self.state.join("audit.log")
    }

    /// Stops the cluster if it runs, wipes etcd, starts it again.
    pub fn fresh(&mut self) -> anyhow::Result<Target> {
        if self.started {
            self.down()?;
        }
        match std::fs::remove_file(self.audit_log()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).context("removing the last side's audit log");
            }
            _ => {}
        }
        let extra = format!(
            "--audit-policy-file={} --audit-log-path={} --audit-log-maxsize=0",
            self.state.join("audit-policy.yaml").display(),
            self.audit_log().display()
        );
        let up_log = self.state.join("kube-up.log");
        self.started = true;
        let status = self
            .kube("up")
            .env("RESET", "1")
            .env("WITH_KCM", if self.controller_manager { "1" } else { "0" })
            .env("APISERVER_EXTRA", extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&up_log)?)
            .status()
            .with_context(|| format!("running {}", self.script.display()))?;
        if !status.success() {
            bail!(
                "`kube up` failed ({status}); its output:\n{}",
                tail(&up_log, 30)
            );
        }
        let kube_dir = self.state.join("kube");
        let pid_file = kube_dir.join("run/kube-apiserver.pid");
        let apiserver_pid = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("{} holds no pid", pid_file.display()))?;
        let admin_kubeconfig = kube_dir.join("kubeconfig");
        let controller_kubeconfig =
            self.credentials_in(&kube_dir, &admin_kubeconfig, CONTROLLER_USER)?;
        Ok(Target {
            admin_kubeconfig,
            controller_kubeconfig,
            apiserver_pid: Some(apiserver_pid),
            audit_log: Some(self.audit_log()),
        })
    }

    /// A kubeconfig of `target` for `user` (one replica of several).
    pub fn credentials(&self, target: &Target, user: &str) -> anyhow::Result<PathBuf> {
        self.credentials_in(&self.state.join("kube"), &target.admin_kubeconfig, user)
    }

    /// A client certificate of `user`'s own (signed by the cluster's CA, in
    /// system:masters) and a kubeconfig with it. The certificates survive a
    /// reset, so this is done once per state dir and user.
    fn credentials_in(
        &self,
        kube_dir: &Path,
        admin_kubeconfig: &Path,
        user: &str,
    ) -> anyhow::Result<PathBuf> {
        let pki = kube_dir.join("pki");
        let key = self.state.join(format!("{user}.key"));
        let cert = self.state.join(format!("{user}.crt"));
        if !cert.exists() {
            let csr = self.state.join(format!("{user}.csr"));
            let ext = self.state.join(format!("{user}.ext"));
            std::fs::write(
                &ext,
                "[v3_client]\nbasicConstraints = critical,CA:FALSE\n\
                 keyUsage = critical,digitalSignature,keyEncipherment\n\
                 extendedKeyUsage = clientAuth\n",
            )?;
            let subject = format!("/O=system:masters/CN={user}");
            let serial = format!(
                "0x{:x}{:04x}",
                std::process::id() as u64 * 7919 + 1,
                user.len() * 31 + user.bytes().map(usize::from).sum::<usize>()
            );
            openssl(&["genrsa", "-out", path(&key), "2048"])?;
            openssl(&[
                "req",
                "-new",
                "-key",
                path(&key),
                "-subj",
                &subject,
                "-out",
                path(&csr),
            ])?;
            openssl(&[
                "x509",
                "-req",
                "-in",
                path(&csr),
                "-CA",
                path(&pki.join("ca.crt")),
                "-CAkey",
                path(&pki.join("ca.key")),
                "-set_serial",
                &serial,
                "-days",
                "7",
                "-sha256",
                "-extfile",
                path(&ext),
                "-extensions",
                "v3_client",
                "-out",
                path(&cert),
            ])?;
        }
        let server = std::fs::read_to_string(admin_kubeconfig)?
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
            .with_context(|| format!("no server in {}", admin_kubeconfig.display()))?;
        let kubeconfig = self.state.join(format!("{user}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
                 users:\n- name: {user}\n  user:\n    client-certificate: {cert}\n    client-key: {key}\n\
                 contexts:\n- name: bench\n  context:\n    cluster: bench\n    user: {user}\ncurrent-context: bench\n",
                ca = pki.join("ca.crt").display(),
                cert = cert.display(),
                key = key.display(),
            ),
        )?;
        Ok(kubeconfig)
    }

    fn down(&mut self) -> anyhow::Result<()> {
        let status = self
            .kube("down")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("running {} down", self.script.display()))?;
        if !status.success() {
            bail!(
                "`kube down` failed ({status}); see `RECONCILER_KUBE_DIR={} {} status`",
                self.state.join("kube").display(),
                self.script.display()
            );
        }
        self.started = false;
        Ok(())
    }
}

impl Drop for LocalKube {
    fn drop(&mut self) {
        if self.started
            && let Err(e) = self.down()
        {
            eprintln!("bench-cluster: {e:#}");
            return; // keep the state dir: it says what is still running
        }
        if self.keep_state {
            eprintln!("bench-cluster: kept the state dir {}", self.state.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.state) {
            eprintln!(
                "bench-cluster: could not remove {}: {e}",
                self.state.display()
            );
        }
    }
}

/// Paths under the state dir, which `LocalKube::new` checked to be UTF-8.
fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

fn openssl(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .context("running openssl (apt-get install -y openssl)")?;
    if !out.status.success() {
        bail!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The last `lines` lines of a log file, for an error message.
pub fn tail(file: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
