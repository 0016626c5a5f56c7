//! A real OCI registry on loopback for tests: Debian's `docker-registry`
//! (the CNCF Distribution registry), anonymous over plain HTTP, or with
//! htpasswd basic auth over TLS from a test CA.
//!
//! Tests that need one call [`Registry::start`] and skip, after a
//! `<suite>: SKIPPED <test>: <why>` line, when the package is not
//! installed (`.ci/run` installs it).

use std::io::Write as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reconciler_host::admission::serving_cert::ServingCert;

pub const REGISTRY_BIN: &str = "docker-registry";
pub const USER: &str = "plugin-pusher";
pub const PASSWORD: &str = "correct horse battery staple";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Anonymous, plain HTTP: reached with `--insecure-registry`.
    Anonymous,
    /// htpasswd basic auth over TLS: reached with `--registry-ca` and a docker config.
    AuthTls,
}

pub struct Registry {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT`.
    pub host: String,
    pub mode: Mode,
    config: PathBuf,
}

/// Why a registry cannot be started here, if it cannot.
pub fn unavailable(mode: Mode) -> Option<String> {
    let found = |bin: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {bin}"))
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !found(REGISTRY_BIN) {
        return Some(
            "the docker-registry package is not installed (apt-get install docker-registry)".into(),
        );
    }
    if mode == Mode::AuthTls && !found("htpasswd") {
        return Some("htpasswd is not installed (apt-get install apache2-utils)".into());
    }
    None
}

/// [`unavailable`], printed as a SKIPPED line for `suite`/`test`; true when
/// the test should return.
pub fn skip(suite: &str, test: &str, mode: Mode) -> bool {
    match unavailable(mode) {
        Some(why) => {
            println!("{suite}: SKIPPED {test}: {why}");
            true
        }
        None => false,
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl Registry {
    /// Starts a registry and waits until it accepts connections.
    pub fn start(mode: Mode) -> Self {
        let dir = tempfile::tempdir().expect("a registry directory");
        let host = format!("127.0.0.1:{}", free_port());
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
            dir.path().join("data").display()
        );
        if mode == Mode::AuthTls {
            let cert = ServingCert::generate(&["127.0.0.1".to_string(), "localhost".to_string()])
                .expect("a test certificate");
            std::fs::write(dir.path().join("cert.pem"), &cert.cert_pem).unwrap();
            std::fs::write(dir.path().join("key.pem"), &cert.key_pem).unwrap();
            std::fs::write(dir.path().join("ca.pem"), &cert.ca_bundle_pem).unwrap();
            let htpasswd = Command::new("htpasswd")
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd runs");
            assert!(htpasswd.status.success(), "htpasswd: {htpasswd:?}");
            std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).unwrap();
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\nauth:\n  htpasswd:\n    realm: reconciler-tests\n    path: {}\n",
                dir.path().join("cert.pem").display(),
                dir.path().join("key.pem").display(),
                dir.path().join("htpasswd").display(),
            ));
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let mut registry = Self {
            child: None,
            dir,
            host,
            mode,
            config: config_path,
        };
        registry.restart();
        registry
    }

    /// Starts the registry again after [`Self::stop`], same port and storage.
    pub fn restart(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("registry.log")).unwrap();
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("docker-registry starts");
        self.child = Some(child);
        let started = Instant::now();
        while TcpStream::connect(&self.host).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the registry did not listen on {} within 20 s: {}",
                self.host,
                std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the registry (a registry that is down).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The test CA's certificate, for `--registry-ca` (TLS mode only).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `oci://HOST/REPO:TAG` on this registry.
    pub fn reference(&self, repo_tag: &str) -> String {
        format!("oci://{}/{repo_tag}", self.host)
    }

    /// Pushes the plugin `file` as `repo_tag` on this registry, signed with
    /// the cosign key `key`, through `cx`'s `reconciler-host push`; its
    /// reference.
    pub fn push_signed(
        &self,
        cx: &crate::real_cluster::RealCluster,
        file: &Path,
        repo_tag: &str,
        key: &str,
    ) -> anyhow::Result<String> {
        let reference = self.reference(repo_tag);
        let file = file.display().to_string();
        let mut args = vec!["push", file.as_str(), reference.as_str()];
        let access = self.access_args();
        args.extend(access.iter().map(String::as_str));
        args.extend(["--sign-key", key]);
        let digest = cx.host_cli(&args)?;
        cx.step(format!("pushed {file} as {reference} ({digest}), signed"));
        Ok(reference)
    }

    /// A registry for a rollout between two podset versions: the PodSet
    /// and Plugin CRDs installed, a cosign key the test's namespace trusts
    /// (Secret `plugin-keys`), and, signed with it, podset-js as
    /// `plugins/podset:1` and the candidate that doubles `size` as
    /// `plugins/podset:2`.
    pub async fn with_podset_versions(
        cx: &mut crate::real_cluster::RealCluster,
    ) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let registry = Self::start(Mode::Anonymous);
        cx.install_crds(&crate::root().join("crds/podset.yaml"))
            .await?;
        cx.install_crds(&crate::root().join("crds/plugin.yaml"))
            .await?;
        let keys = cx.workdir().join("signer");
        cx.host_cli(&["keygen", "--output", keys.to_str().context("a UTF-8 path")?])?;
        let key = keys.with_extension("key").display().to_string();
        cx.create(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "plugin-keys"},
            "stringData": {"cosign.pub": std::fs::read_to_string(keys.with_extension("pub"))?}}))
            .await?;
        let serving = crate::example_plugin("podset-js/podset-js");
        registry.push_signed(cx, &serving, "plugins/podset:1", &key)?;
        let candidate = crate::test_plugin("podset-doubled-js");
        registry.push_signed(cx, &candidate, "plugins/podset:2", &key)?;
        Ok(registry)
    }

    /// The command-line options that reach this registry (no credentials).
    pub fn access_args(&self) -> Vec<String> {
        match self.mode {
            Mode::Anonymous => vec!["--insecure-registry".into(), self.host.clone()],
            Mode::AuthTls => vec!["--registry-ca".into(), self.ca_file().display().to_string()],
        }
    }

    /// A docker config directory holding this registry's credentials, for
    /// `DOCKER_CONFIG`.
    pub fn docker_config(&self, user: &str, password: &str) -> tempfile::TempDir {
        use base64::Engine as _;
        let dir = tempfile::tempdir().unwrap();
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut file = std::fs::File::create(dir.path().join("config.json")).unwrap();
        write!(
            file,
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            self.host
        )
        .unwrap();
        dir
    }

    /// The file the registry keeps the blob `sha256:HEX` in, to tamper with.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    pub fn storage(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
