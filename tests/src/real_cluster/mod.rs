//! A harness for tests against a real Kubernetes API server.
//!
//! Each test gets a namespace of its own (server-generated name, labelled
//! `app.kubernetes.io/created-by=reconciler-host-e2e-test`), optionally a
//! `reconciler-host run` serving only that namespace, and helpers to create
//! objects, wait for states and read Events. Whatever the test does, and
//! also when it panics, the host is stopped with SIGTERM (expected to exit
//! 0), the finalizers of the test's custom objects are released, and the
//! namespace is deleted and awaited; a failure then prints the host's log.
//! So tests are safe to run in parallel, in one process or several, on one
//! cluster.
//!
//! CRDs are shared, never deleted (see [`crds`]).
//!
//! Tests are skipped, passing after a `<suite>: SKIPPED <test>: <why>` line
//! on stderr (which `scripts/test` counts), unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are both set. The cluster must run a kube-controller-manager
//! (garbage collection, namespace deletion); `../shared/kube` does.
//!
//! A test that kills or compacts the control plane runs on one of its own
//! instead ([`Suite::run_on_own_control_plane`], see [`control_plane`]),
//! which is stopped at the end; it is skipped unless `RECONCILER_E2E=1` and
//! `../shared/kube` is there.

pub mod control_plane;
pub mod crds;
pub mod events;
pub mod host_process;
pub mod kubeconfig;
pub mod members;
pub mod objects;
pub mod podset_convergence;
pub mod poll;
mod replicas;
pub mod severable_link;

use std::collections::HashMap;
use std::io::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use futures::FutureExt as _;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use reconciler_sdk::KindRef;
use serde_json::json;

pub use control_plane::{OwnControlPlane, audit_log_flags};
pub use crds::InstalledCrd;
pub use events::SeenEvent;
pub use host_process::HostProcess;
pub use objects::{controller_of, controller_reference, is_api_error, owner_references, uid_of};
pub use poll::Probe;
pub use severable_link::SeverableLink;

/// The field manager of the tests' own writes, and the value of the
/// `app.kubernetes.io/created-by` label on their namespaces.
pub const TEST_MANAGER: &str = "reconciler-host-e2e-test";
/// Objects with no finalizers go at once; the namespace controller then
/// needs a few rounds of discovery and deletion.
const NAMESPACE_GONE_TIMEOUT: Duration = Duration::from_secs(120);

/// Why real-cluster tests do not run here, or `None` if they do.
pub fn skip_reason() -> Option<String> {
    let mut missing = Vec::new();
    match std::env::var_os("RECONCILER_E2E") {
        Some(v) if v == "1" => {}
        Some(v) => missing.push(format!("RECONCILER_E2E is {v:?}, not \"1\"")),
        None => missing.push("RECONCILER_E2E is not set".to_string()),
    }
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => {}
        Some(_) => missing.push("KUBECONFIG is empty".to_string()),
        None => missing.push("KUBECONFIG is not set".to_string()),
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

/// One test file of real-cluster tests.
pub struct Suite {
    /// The test file's name: `cargo test --test <name>`, and the prefix of
    /// its SKIPPED lines.
    pub name: &'static str,
    /// The host binary: `env!("CARGO_BIN_EXE_reconciler-host-under-test")`
    /// (only integration tests of this package see that variable).
    pub host_binary: &'static str,
}

impl Suite {
    /// Runs `body` in a fresh namespace, then cleans up; panics with what
    /// went wrong, after the cleanup. Skips (passing) without a cluster.
    pub fn run(&self, test: &str, body: impl AsyncFnOnce(&mut RealCluster) -> Result<()>) {
        if let Some(why) = skip_reason() {
            self.skip(
                test,
                &why,
                "RECONCILER_E2E=1 KUBECONFIG=~/.kube/config cargo test -p reconciler-tests",
            );
            return;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        if let Err(e) = runtime.block_on(self.run_in_namespace(test, None, body)) {
            panic!("{test}: {e:#}");
        }
    }

    /// Like [`Suite::run`], on a control plane of the test's own, started
    /// with `kube` settings `settings` and stopped at the end, whatever
    /// happens. Skips unless `RECONCILER_E2E=1` and `../shared/kube` is
    /// there, whatever `KUBECONFIG` says.
    pub fn run_on_own_control_plane(
        &self,
        test: &str,
        settings: &[(&'static str, &str)],
        body: impl AsyncFnOnce(&mut RealCluster) -> Result<()>,
    ) {
        if let Some(why) = control_plane::own_control_plane_skip_reason() {
            self.skip(
                test,
                &why,
                "RECONCILER_E2E=1 cargo test -p reconciler-tests",
            );
            return;
        }
        let started = Instant::now();
        let plane = match OwnControlPlane::up(settings) {
            Ok(plane) => plane,
            Err(e) => panic!("{test}: starting a control plane of its own: {e:#}"),
        };
        eprintln!(
            "[{test} {:6.1}s] started a control plane of its own in {}",
            started.elapsed().as_secs_f64(),
            plane.state_dir().display()
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        if let Err(e) = runtime.block_on(self.run_in_namespace(test, Some(plane), body)) {
            panic!("{test}: {e:#}");
        }
    }

    /// Says on stderr that `test` is skipped, why, and the command that runs it.
    pub fn skip(&self, test: &str, why: &str, command: &str) {
        // Straight to the process's stderr: the test harness captures
        // `eprintln!` of a passing test, and a skip must be seen. One
        // write of the whole line, so that the lines of tests skipping
        // in parallel (and libtest's own) do not interleave within it.
        let line = format!(
            "{suite}: SKIPPED {test}: {why}. To run it against a cluster: scripts/build-plugins, \
             then {command} --test {suite} -- --nocapture\n",
            suite = self.name
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
    }

    async fn run_in_namespace(
        &self,
        test: &str,
        plane: Option<OwnControlPlane>,
        body: impl AsyncFnOnce(&mut RealCluster) -> Result<()>,
    ) -> Result<()> {
        let mut cluster = RealCluster::new(test, Path::new(self.host_binary), plane).await?;
        cluster.step(format!("namespace {}", cluster.namespace));
        // From here on, the outcome (or panic) is reported only after the
        // cleanup.
        let outcome = AssertUnwindSafe(body(&mut cluster))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Err(anyhow!("the test panicked: {}", panic_message(&*panic))));
        let mut problems = Vec::new();
        if let Err(e) = &outcome {
            problems.push(format!("{e:#}"));
        }
        problems.extend(cluster.cleanup().await);
        if problems.is_empty() {
            cluster.step(if cluster.plane.is_some() {
                "passed; its control plane is stopped"
            } else {
                "passed; its namespace is gone"
            });
            return Ok(());
        }
        if let Some(host) = &cluster.host {
            eprintln!("{}", host.log_tail());
        }
        bail!("{}", problems.join("\n"))
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".to_string())
}

/// One test's view of the cluster: its namespace, its host, its CRDs.
pub struct RealCluster {
    pub client: Client,
    /// The test's own namespace.
    pub namespace: String,
    test: String,
    started: Instant,
    host_binary: PathBuf,
    workdir: tempfile::TempDir,
    host: Option<HostProcess>,
    /// Set once cleanup stopped the host: waits no longer expect it to run.
    host_stopped: bool,
    crds: Vec<InstalledCrd>,
    kinds: Mutex<HashMap<KindRef, (ApiResource, bool)>>,
    /// The test's own control plane, if it has one: its kubeconfig is the
    /// test's and the host's, and it is stopped at the end.
    plane: Option<OwnControlPlane>,
    /// Cluster-scoped objects the test created, deleted at the end: they
    /// outlive the namespace.
    cluster_scoped: Mutex<Vec<(KindRef, String)>>,
}

impl RealCluster {
    async fn new(test: &str, host_binary: &Path, plane: Option<OwnControlPlane>) -> Result<Self> {
        // Everything that can fail before the namespace exists, so that a
        // namespace is never left behind by a failed start.
        let workdir = tempfile::tempdir().context("creating a temporary directory")?;
        let client = match &plane {
            None => Client::try_default()
                .await
                .context("building a Kubernetes client from KUBECONFIG")?,
            Some(plane) => client_of(plane.kubeconfig()).await?,
        };
        let namespaces: Api<DynamicObject> = Api::all_with(client.clone(), &namespace_resource());
        // The test's name in the namespace's, so a leftover says whose it is.
        let tag: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let namespace: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {
                "generateName": format!("e2e-{}-", tag.trim_end_matches('-')),
                "labels": {"app.kubernetes.io/created-by": TEST_MANAGER},
            },
        }))?;
        let params = PostParams {
            field_manager: Some(TEST_MANAGER.to_string()),
            ..PostParams::default()
        };
        let created = namespaces
            .create(&params, &namespace)
            .await
            .context("creating the test's namespace (is the cluster of KUBECONFIG reachable?)")?;
        let namespace = created
            .metadata
            .name
            .context("the created namespace has no name")?;
        Ok(Self {
            client,
            namespace,
            test: test.to_string(),
            started: Instant::now(),
            host_binary: host_binary.to_path_buf(),
            workdir,
            host: None,
            host_stopped: false,
            crds: Vec::new(),
            kinds: Mutex::new(HashMap::new()),
            plane,
            cluster_scoped: Mutex::new(Vec::new()),
        })
    }

    /// The test's own control plane ([`Suite::run_on_own_control_plane`]).
    pub fn own_control_plane(&self) -> Result<&OwnControlPlane> {
        self.plane
            .as_ref()
            .context("the test has no control plane of its own (Suite::run_on_own_control_plane)")
    }

    /// The kubeconfig the test's client uses: its own control plane's, or
    /// `None` for `KUBECONFIG`'s.
    pub fn kubeconfig(&self) -> Option<&Path> {
        self.plane.as_ref().map(OwnControlPlane::kubeconfig)
    }

    /// A temporary directory of the test's, removed at the end.
    pub fn workdir(&self) -> &Path {
        self.workdir.path()
    }

    /// The host binary with its shared compile cache, for its other
    /// commands (`rbac`, `inspect`); it talks to the test's cluster.
    pub fn host_command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.host_binary);
        command
            .arg("--compile-cache")
            .arg(crate::test_compile_cache_dir())
            .env("NO_COLOR", "1");
        if let Some(kubeconfig) = self.kubeconfig() {
            command.env("KUBECONFIG", kubeconfig);
        }
        command
    }

    /// Runs a host command that signs, pushes or pulls (keygen, push,
    /// plan) and must succeed: the test's key password, none of the user's
    /// registry credentials; fails with its stderr. Its stdout, trimmed.
    pub fn host_cli(&self, args: &[&str]) -> Result<String> {
        let out = self
            .host_command()
            .args(args)
            .env("COSIGN_PASSWORD", "e2e")
            .env("DOCKER_CONFIG", self.workdir().join("no-docker-config"))
            .output()
            .context("running the host binary")?;
        anyhow::ensure!(
            out.status.success(),
            "reconciler-host {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    }

    /// A progress line, visible with `--nocapture` and on failure.
    pub fn step(&self, message: impl std::fmt::Display) {
        eprintln!(
            "[{} {:6.1}s] {message}",
            self.test,
            self.started.elapsed().as_secs_f64()
        );
    }

    fn lock_kinds(&self) -> MutexGuard<'_, HashMap<KindRef, (ApiResource, bool)>> {
        self.kinds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts `reconciler-host run` for the test's namespace with exactly
    /// these plugins (.wasm files).
    pub fn start_host(&mut self, plugins: &[PathBuf]) -> Result<&HostProcess> {
        let kubeconfig = self.kubeconfig().map(Path::to_path_buf);
        self.start_host_with(plugins, kubeconfig.as_deref(), &[])
    }

    /// Starts the host as [`RealCluster::start_host`], with `kubeconfig` as
    /// its KUBECONFIG: another server (a relay) or another user.
    pub fn start_host_with_kubeconfig(
        &mut self,
        plugins: &[PathBuf],
        kubeconfig: &Path,
    ) -> Result<&HostProcess> {
        self.start_host_with(plugins, Some(kubeconfig), &[])
    }

    /// [`Self::start_host_with_kubeconfig`] with `args` after `run`'s own.
    pub fn start_host_with_kubeconfig_and_args(
        &mut self,
        plugins: &[PathBuf],
        kubeconfig: &Path,
        args: &[&str],
    ) -> Result<&HostProcess> {
        self.start_host_with_run_args(plugins, Some(kubeconfig), args)
    }

    /// [`Self::start_host`] with these variables added to the host's
    /// environment, e.g. `RUST_LOG` for log lines a test looks for.
    pub fn start_host_with_env(
        &mut self,
        plugins: &[PathBuf],
        env: &[(&str, &str)],
    ) -> Result<&HostProcess> {
        let kubeconfig = self.kubeconfig().map(Path::to_path_buf);
        self.start_host_with(plugins, kubeconfig.as_deref(), env)
    }

    /// [`Self::start_host`] with `args` after `run`'s own (admission flags,
    /// say).
    pub fn start_host_with_args(
        &mut self,
        plugins: &[PathBuf],
        args: &[&str],
    ) -> Result<&HostProcess> {
        let kubeconfig = self.kubeconfig().map(Path::to_path_buf);
        self.start_host_with_run_args(plugins, kubeconfig.as_deref(), args)
    }

    fn start_host_with_run_args(
        &mut self,
        plugins: &[PathBuf],
        kubeconfig: Option<&Path>,
        args: &[&str],
    ) -> Result<&HostProcess> {
        if self.host.is_some() {
            bail!("the test already started a host");
        }
        let kubeconfig = kubeconfig.map(|k| k.to_string_lossy().into_owned());
        let env: Vec<(&str, &str)> = kubeconfig
            .iter()
            .map(|k| ("KUBECONFIG", k.as_str()))
            .collect();
        let host = HostProcess::start_with(
            &self.host_binary,
            self.workdir.path(),
            &crate::test_compile_cache_dir(),
            plugins,
            &self.namespace,
            args,
            &env,
        )?;
        self.step(format!(
            "started reconciler-host run (pid {}) with {args:?}",
            host.pid()
        ));
        Ok(self.host.insert(host))
    }

    fn start_host_with(
        &mut self,
        plugins: &[PathBuf],
        kubeconfig: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Result<&HostProcess> {
        if self.host.is_some() {
            bail!("the test already started a host");
        }
        let host = HostProcess::start(
            &self.host_binary,
            self.workdir.path(),
            &crate::test_compile_cache_dir(),
            plugins,
            &self.namespace,
            kubeconfig,
            env,
        )?;
        self.step(format!(
            "started reconciler-host run (pid {}) with {:?}",
            host.pid(),
            plugins
                .iter()
                .filter_map(|p| p.file_name())
                .collect::<Vec<_>>()
        ));
        Ok(self.host.insert(host))
    }

    /// Stops the test's host with SIGTERM, expecting exit code 0; the end
    /// of the test does it too, if the test did not.
    pub async fn stop_host(&mut self) -> Result<()> {
        if self.host_stopped {
            return Ok(());
        }
        self.host_stopped = true;
        let Some(host) = &self.host else {
            return Ok(());
        };
        host.stop().await?;
        self.step("the host exited with code 0 after SIGTERM");
        Ok(())
    }

    /// The host the test started.
    pub fn host(&self) -> Result<&HostProcess> {
        self.host
            .as_ref()
            .context("the test has not started a host (start_host)")
    }

    /// Polls `probe` until it is ready, failing after `timeout`, or at once
    /// if the test's host exited.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        probe: impl AsyncFnMut() -> Result<Probe<T>>,
    ) -> Result<T> {
        let alive = || match &self.host {
            Some(host) if !self.host_stopped => host.ensure_running(),
            _ => Ok(()),
        };
        let progress = |line: String| self.step(line);
        poll::poll(what, timeout, &alive, &progress, probe).await
    }

    /// Waits for the host to say where it serves its reports (`run
    /// --metrics-listen ... --metrics-insecure`): `http://ADDRESS`.
    pub async fn wait_for_reports_url(&self) -> Result<String> {
        let marker = "serving /metrics and /plugins on http://";
        let line = self
            .wait_for_log(&[marker], Duration::from_secs(60))
            .await?;
        let address = line
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .with_context(|| format!("no address after {marker:?} in {line:?}"))?;
        Ok(format!("http://{address}"))
    }

    /// Waits until one line of the host's log contains every one of
    /// `needles`, and returns it.
    pub async fn wait_for_log(&self, needles: &[&str], timeout: Duration) -> Result<String> {
        let host = self.host()?;
        self.wait_for(
            &format!("a line of the host's log with {needles:?}"),
            timeout,
            async || {
                Ok(match host.log_lines_with(needles).into_iter().next() {
                    Some(line) => Probe::Ready(line),
                    None => Probe::Pending(format!(
                        "{} lines, none with all of them",
                        host.log_text().lines().count()
                    )),
                })
            },
        )
        .await
    }

    /// Removes everything the test created; what went wrong, if anything.
    /// Every step is attempted even when an earlier one failed.
    async fn cleanup(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        // First the host, so that nothing writes into the namespace any more.
        if let Err(e) = self.stop_host().await {
            problems.push(format!("{e:#}"));
        }
        if let Some(plane) = &mut self.plane {
            // Everything goes with the cluster.
            match plane.down() {
                Ok(()) => self.step("stopped the test's control plane"),
                Err(e) => problems.push(format!("{e:#}")),
            }
            return problems;
        }
        if let Err(e) = self.delete_cluster_scoped().await {
            problems.push(format!("{e:#}"));
        }
        // With the host gone nobody would release them, and the namespace
        // would wait for them forever.
        if let Err(e) = self.release_finalizers().await {
            problems.push(format!("{e:#}"));
        }
        if let Err(e) = self.delete_namespace().await {
            problems.push(format!("{e:#}"));
        }
        problems
    }

    /// Has `kind`/`name`, a cluster-scoped object, deleted at the end.
    pub(crate) fn delete_at_cleanup(&self, kind: KindRef, name: &str) {
        self.cluster_scoped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((kind, name.to_string()));
    }

    async fn delete_cluster_scoped(&self) -> Result<()> {
        let objects = std::mem::take(
            &mut *self
                .cluster_scoped
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let mut failed = Vec::new();
        for (kind, name) in objects.iter().rev() {
            match self.delete(kind, name).await {
                Ok(()) => self.step(format!("deleted {} {name}", kind.kind)),
                Err(e) => failed.push(format!(
                    "{e:#}; delete it with kubectl delete {} {name}",
                    kind.kind.to_lowercase()
                )),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            bail!("{}", failed.join("\n"))
        }
    }

    async fn release_finalizers(&self) -> Result<()> {
        let params = PatchParams {
            field_manager: Some(TEST_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let release = json!({"metadata": {"finalizers": null}});
        for crd in self.crds.iter().filter(|c| c.namespaced) {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &self.namespace, &crd.resource);
            let listed = match api.list_metadata(&ListParams::default()).await {
                Ok(listed) => listed,
                Err(e) if is_api_error(&e, 404) => continue,
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "listing {} in {} to release their finalizers",
                            crd.name, self.namespace
                        )
                    });
                }
            };
            for object in listed.items {
                let Some(name) = object.metadata.name else {
                    continue;
                };
                if object.metadata.finalizers.unwrap_or_default().is_empty() {
                    continue;
                }
                match api.patch(&name, &params, &Patch::Merge(&release)).await {
                    Ok(_) => self.step(format!(
                        "released the finalizers of {} {name}",
                        crd.resource.kind
                    )),
                    Err(e) if is_api_error(&e, 404) => {}
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!(
                                "releasing the finalizers of {} {}/{name}; release them with \
                                 kubectl patch {} {name} -n {} --type merge -p '{{\"metadata\":{{\"finalizers\":null}}}}'",
                                crd.resource.kind, self.namespace, crd.resource.plural, self.namespace
                            )
                        });
                    }
                }
            }
        }
        Ok(())
    }

    async fn delete_namespace(&self) -> Result<()> {
        let ns = &self.namespace;
        let namespaces: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &namespace_resource());
        match namespaces.delete(ns, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_api_error(&e, 404) => return Ok(()),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("deleting namespace {ns}; delete it with kubectl delete namespace {ns}")
                });
            }
        }
        self.step(format!("deleting namespace {ns}; waiting until it is gone"));
        self.wait_for_namespace_gone(NAMESPACE_GONE_TIMEOUT)
            .await
            .with_context(|| format!("check with kubectl get namespace {ns} -o yaml"))
    }

    /// Waits until the test's namespace no longer exists.
    pub async fn wait_for_namespace_gone(&self, timeout: Duration) -> Result<()> {
        let ns = &self.namespace;
        let namespaces: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &namespace_resource());
        self.wait_for(
            &format!("namespace {ns} to be deleted"),
            timeout,
            async || {
                let Some(found) = namespaces.get_opt(ns).await? else {
                    return Ok(Probe::Ready(()));
                };
                let conditions: Vec<String> = found.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["status"] == "True")
                    .map(|c| {
                        format!(
                            "{}: {}",
                            c["type"].as_str().unwrap_or("?"),
                            c["message"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                Ok(Probe::Pending(format!(
                    "phase {}, conditions {conditions:?}",
                    found.data["status"]["phase"]
                )))
            },
        )
        .await
    }
}

/// A client for the cluster of the kubeconfig file `path`.
async fn client_of(path: &Path) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("loading {}", path.display()))?;
    Client::try_from(config).with_context(|| format!("building a client for {}", path.display()))
}

fn namespace_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Namespace"), "namespaces")
}
