//! Finalizers across plugin versions and confined reads, against a real
//! Kubernetes API server: the engine with the compiled hostile plugin over
//! the Kubernetes backend, in a namespace of the test's own.
//!
//! Skipped (it passes, printing why) unless both `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set:
//!
//! ```text
//! scripts/build-plugins
//! RECONCILER_E2E=1 KUBECONFIG=~/.kube/config \
//!     cargo test -p reconciler-tests --test finalizers_and_reads_real_cluster -- --nocapture
//! ```
//!
//! It server-side applies `tests/crds/hostile.yaml` and leaves it installed
//! (other tests use the Hostile kind too); each test creates a namespace
//! `hostile-e2e-<random>`, labelled
//! `app.kubernetes.io/created-by=reconciler-host-e2e-test`, and deletes it at
//! the end after releasing whatever finalizer is left in it.

use std::collections::BTreeSet;
use std::future::Future;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use reconciler_host::cluster::kubernetes::KubernetesBackend;
use reconciler_host::cluster::{ObjectKey, RealClock};
use reconciler_host::engine::{Engine, Outcome, ReconcileRecord, ServeScope};
use reconciler_host::plugin::hot_reload::{PluginDirectory, ReloadEvent};
use reconciler_sdk::KindRef;
use reconciler_tests::{root, sandbox, test_plugin};
use serde_json::{Value, json};

const OLD: &str = "hostile.example.com/cleanup";
const RENAMED: &str = "hostile.example.com/cleanup-v2";
const MANAGER: &str = "reconciler-host-e2e-test";
const TIMEOUT: Duration = Duration::from_secs(90);

/// Why these tests do not run here, or `None` if they do.
fn skip_reason() -> Option<String> {
    let mut missing = Vec::new();
    match std::env::var_os("RECONCILER_E2E") {
        Some(v) if v == "1" => {}
        Some(v) => missing.push(format!("RECONCILER_E2E is {v:?}, not \"1\"")),
        None => missing.push("RECONCILER_E2E is not set".to_string()),
    }
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => {}
        _ => missing.push("KUBECONFIG is not set".to_string()),
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

fn skipped(test: &str) -> bool {
    let Some(why) = skip_reason() else {
        return false;
    };
    let _ = writeln!(
        std::io::stderr(),
        "finalizers_and_reads_real_cluster: SKIPPED {test}: {why}. To run it: scripts/build-plugins, then \
         RECONCILER_E2E=1 KUBECONFIG=~/.kube/config cargo test -p reconciler-tests --test finalizers_and_reads_real_cluster"
    );
    true
}

fn step(message: impl std::fmt::Display) {
    eprintln!("[finalizers_and_reads_real_cluster] {message}");
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn hostiles() -> ApiResource {
    resource("hostile.example.com", "v1", "Hostile", "hostiles")
}

/// A namespace with the Hostile CRD installed and the first version of the
/// hostile plugin serving it, through the Kubernetes backend.
struct Cluster {
    client: Client,
    namespace: String,
    engine: Engine<KubernetesBackend>,
    dir: tempfile::TempDir,
    plugins: PluginDirectory,
    records: std::sync::Mutex<Vec<ReconcileRecord>>,
}

impl Cluster {
    async fn start() -> Result<Self> {
        let client = Client::try_default()
            .await
            .context("a Kubernetes client from KUBECONFIG")?;
        install_hostile_crd(&client).await?;
        let namespaces: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource("", "v1", "Namespace", "namespaces"),
        );
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"generateName": "hostile-e2e-",
                "labels": {"app.kubernetes.io/created-by": MANAGER}}
        }))?;
        let namespace = namespaces
            .create(&PostParams::default(), &object)
            .await?
            .metadata
            .name
            .context("the server names the namespace")?;
        step(format!("namespace {namespace}"));
        let engine = Engine::scoped(
            Arc::new(KubernetesBackend::new(client.clone())),
            Arc::new(RealClock),
            ServeScope {
                namespaces: BTreeSet::from([namespace.clone()]),
                ..ServeScope::default()
            },
        );
        let dir = tempfile::tempdir()?;
        let plugins = PluginDirectory::new(dir.path(), sandbox().clone());
        let mut cluster = Self {
            client,
            namespace,
            engine,
            dir,
            plugins,
            records: std::sync::Mutex::new(Vec::new()),
        };
        cluster.drop_in(&test_plugin("hostile"));
        // A CRD just established may not be served for a moment: the plugin
        // then waits and is retried.
        let deadline = Instant::now() + TIMEOUT;
        let mut events = cluster.plugins.sync(&cluster.engine).await;
        while !events
            .iter()
            .any(|e| matches!(e, ReloadEvent::Loaded { .. }))
        {
            if Instant::now() > deadline {
                bail!("the hostile plugin did not start: {events:?}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            events = cluster.plugins.retry_waiting(&cluster.engine).await;
        }
        Ok(cluster)
    }

    fn drop_in(&self, from: &Path) {
        let tmp = self.dir.path().join(".hostile.wasm.tmp");
        std::fs::copy(from, &tmp).expect("copy the plugin");
        std::fs::rename(&tmp, self.dir.path().join("hostile.wasm")).expect("rename the plugin");
    }

    fn api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &hostiles())
    }

    fn key(&self, name: &str) -> ObjectKey {
        ObjectKey::new(
            KindRef::new("hostile.example.com", "v1", "Hostile"),
            Some(&self.namespace),
            name,
        )
    }

    async fn create(&self, name: &str, mode: &str) -> Result<()> {
        let object = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
            "metadata": {"name": name, "namespace": self.namespace}, "spec": {"mode": mode}});
        self.api()
            .patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(&object))
            .await
            .with_context(|| format!("creating Hostile {name}"))?;
        Ok(())
    }

    async fn get(&self, name: &str) -> Result<Option<Value>> {
        let found = self.api().get_opt(name).await?;
        Ok(found.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }

    async fn finalizers(&self, name: &str) -> Result<Vec<String>> {
        let object = self.get(name).await?.context("the object exists")?;
        Ok(serde_json::from_value(object["metadata"]["finalizers"].clone()).unwrap_or_default())
    }

    /// The object as the engine's cache holds it.
    fn cached(&self, name: &str) -> Option<Value> {
        self.engine.cache().get(&self.key(name))
    }

    fn cached_finalizers(&self, name: &str) -> Vec<String> {
        self.cached(name)
            .and_then(|o| serde_json::from_value(o["metadata"]["finalizers"].clone()).ok())
            .unwrap_or_default()
    }

    /// Reconciles whatever is ready, over and over, until `done` says so.
    async fn drive_until(&self, what: &str, done: impl Fn(&Self) -> bool) -> Result<()> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            self.engine.pump();
            while let Some((plugin, key)) = self.engine.next_ready() {
                let record = self.engine.reconcile(&plugin, key).await;
                step(&record);
                self.records.lock().unwrap().push(record);
                self.engine.pump();
            }
            if done(self) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("timed out waiting until {what}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Events on `name` as (reason, message).
    async fn events_on(&self, name: &str) -> Result<Vec<(String, String)>> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &resource("events.k8s.io", "v1", "Event", "events"),
        );
        let events = api.list(&ListParams::default()).await?;
        Ok(events
            .items
            .into_iter()
            .filter(|e| e.data["regarding"]["name"] == json!(name))
            .map(|e| {
                let text = |field: &str| e.data[field].as_str().unwrap_or_default().to_string();
                (text("reason"), text("note"))
            })
            .collect())
    }

    /// Releases what is left and deletes the namespace.
    async fn clean_up(&self) {
        if let Ok(list) = self.api().list(&ListParams::default()).await {
            for object in list.items {
                if let Some(name) = object.metadata.name {
                    let release = json!({"metadata": {"finalizers": null}});
                    let _ = self
                        .api()
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
                        .await;
                }
            }
        }
        let namespaces: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &resource("", "v1", "Namespace", "namespaces"),
        );
        let _ = namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await;
    }
}

async fn install_hostile_crd(client: &Client) -> Result<()> {
    let text = std::fs::read_to_string(root().join("tests/crds/hostile.yaml"))?;
    let crd: Value = serde_yaml_ng::from_str(&text)?;
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    let name = "hostiles.hostile.example.com";
    api.patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(&crd))
        .await
        .context("installing tests/crds/hostile.yaml")?;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let crd = api.get(name).await?;
        let established = crd.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name} is not established");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Runs one test's flow on a fresh namespace and always cleans up.
async fn run_on_a_cluster(flow: for<'a> fn(&'a mut Cluster) -> FlowFuture<'a>) {
    let mut cluster = Cluster::start()
        .await
        .expect("the test's namespace and plugin");
    let result = flow(&mut cluster).await;
    cluster.clean_up().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

type FlowFuture<'a> = std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_finalizer_is_handed_over_and_a_removed_plugin_names_its_objects() {
    if skipped("a_renamed_finalizer_is_handed_over_and_a_removed_plugin_names_its_objects") {
        return;
    }
    run_on_a_cluster(|c| Box::pin(renamed_finalizer_then_removal(c))).await;
}

async fn renamed_finalizer_then_removal(c: &mut Cluster) -> Result<()> {
    c.create("live", "ok").await?;
    c.create("leaving", "ok").await?;
    c.drive_until("both carry the first finalizer", |c| {
        c.cached_finalizers("live") == [OLD] && c.cached_finalizers("leaving") == [OLD]
    })
    .await?;
    c.api().delete("leaving", &DeleteParams::default()).await?;
    c.drive_until("the cache sees the deletion", |c| {
        c.cached("leaving")
            .is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string())
    })
    .await?;

    step("reloading with a renamed finalizer");
    c.drop_in(&test_plugin("hostile-renamed-finalizer"));
    let events = c.plugins.sync(&c.engine).await;
    let [ReloadEvent::Reloaded { finalizers, .. }] = events.as_slice() else {
        bail!("expected one reload, got {events:?}");
    };
    let finalizers = finalizers.clone().context("the finalizer changed")?;
    ensure!(
        (finalizers.released_live, finalizers.handed_over) == (1, 1)
            && finalizers.failed.is_empty(),
        "{}",
        events[0]
    );
    c.drive_until("the live one carries the new finalizer", |c| {
        c.cached_finalizers("live") == [RENAMED]
    })
    .await?;
    ensure!(c.finalizers("live").await? == [RENAMED]);
    let replaced = c.events_on("live").await?;
    ensure!(
        replaced
            .iter()
            .any(|(reason, note)| reason == "FinalizerReplaced"
                && note.contains(&format!("declares finalizer {RENAMED} instead of {OLD}"))),
        "{replaced:?}"
    );
    let handed = c.events_on("leaving").await?;
    ensure!(
        handed
            .iter()
            .any(|(reason, _)| reason == "FinalizerHandedOver"),
        "{handed:?}"
    );
    ensure!(
        c.finalizers("leaving").await? == [OLD],
        "held until the new version says finalized"
    );

    step("the new version finalizes the deleting one");
    let done = json!({"metadata": {"annotations": {"hostile.example.com/cleanup-done": "true"}}});
    c.api()
        .patch("leaving", &PatchParams::default(), &Patch::Merge(&done))
        .await?;
    c.drive_until("the deleting one is gone", |c| {
        c.cached("leaving").is_none()
    })
    .await?;
    ensure!(c.get("leaving").await?.is_none());

    step("removing the plugin");
    std::fs::remove_file(c.dir.path().join("hostile.wasm"))?;
    let events = c.plugins.sync(&c.engine).await;
    let [ReloadEvent::Unloaded { holds, .. }] = events.as_slice() else {
        bail!("expected one unload, got {events:?}");
    };
    ensure!(holds.len() == 1, "{}", events[0]);
    let command = holds[0].release_command();
    ensure!(
        events[0].to_string().contains(&command),
        "the line shows the command: {}",
        events[0]
    );
    // The command as printed, run as a user would.
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .output()
        .context("running the printed kubectl command (is kubectl installed?)")?;
    ensure!(
        output.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(c.finalizers("live").await?.is_empty(), "released");
    c.api().delete("live", &DeleteParams::default()).await?;
    let deadline = Instant::now() + TIMEOUT;
    while c.get("live").await?.is_some() {
        ensure!(Instant::now() < deadline, "live was not deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_namespace_read_kind_cannot_be_read_in_another_namespace() {
    if skipped("a_same_namespace_read_kind_cannot_be_read_in_another_namespace") {
        return;
    }
    run_on_a_cluster(|c| Box::pin(confined_reads(c))).await;
}

async fn confined_reads(c: &mut Cluster) -> Result<()> {
    // A Pod needs its namespace's default service account.
    let accounts: Api<DynamicObject> = Api::namespaced_with(
        c.client.clone(),
        &c.namespace,
        &resource("", "v1", "ServiceAccount", "serviceaccounts"),
    );
    let deadline = Instant::now() + TIMEOUT;
    while accounts.get_opt("default").await?.is_none() {
        ensure!(Instant::now() < deadline, "no default service account");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pods: Api<DynamicObject> = Api::namespaced_with(
        c.client.clone(),
        &c.namespace,
        &resource("", "v1", "Pod", "pods"),
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mine"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
    pods.patch("mine", &PatchParams::apply(MANAGER), &Patch::Apply(&pod))
        .await?;
    c.drive_until("the Pod is cached", |c| {
        c.engine
            .cache()
            .get(&ObjectKey::new(
                KindRef::new("", "v1", "Pod"),
                Some(&c.namespace),
                "mine",
            ))
            .is_some()
    })
    .await?;
    c.create("own", "read-own-namespace").await?;
    c.create("nosy", "read-other-namespace").await?;
    c.drive_until("own lists its namespace's Pods", |c| {
        c.cached("own")
            .is_some_and(|o| o["status"] == json!({"pods": ["mine"]}))
    })
    .await?;
    c.drive_until("nosy is refused", |c| {
        c.records.lock().unwrap().iter().any(|r| {
            r.object.name == "nosy"
                && matches!(&r.outcome, Outcome::Failed { message, .. }
                    if message.contains("declared v1 Pod a same-namespace read kind")
                        && message.contains("not in \"kube-system\""))
        })
    })
    .await?;
    let events = c.events_on("nosy").await?;
    ensure!(
        events
            .iter()
            .any(|(reason, note)| reason == "ReconcileError"
                && note.contains("same-namespace read kind")),
        "a Warning Event names the rule: {events:?}"
    );
    let nosy = c.get("nosy").await?.context("nosy exists")?;
    ensure!(nosy.get("status").is_none(), "nothing applied: {nosy}");
    Ok(())
}
