//! The host's container image, run as deploy/ describes, by a real OCI
//! runtime against a real API server (issue 50, points 2 to 4).
//!
//! The way there is the README's: `scripts/build-image`, `skopeo copy` to
//! a registry (Debian's, on loopback), the image pinned by digest in
//! deploy/'s kustomization (`images:`), deploy/ applied. Then the test
//! plays the kubelet (tests/src/container): it reads the Deployment's pod
//! template back from the API server, pulls the image it names by digest,
//! and runs two replicas with `runc`, each from the template: args, env,
//! user 65532, read-only root, capabilities dropped, the memory limit as a
//! cgroup limit, the volumes, and a token of the service account deploy/
//! creates where kube's in-cluster configuration reads it.
//!
//! What it checks: the host is PID 1; it passes the manifest's probes
//! polled at their periods; its guest memory budget is half the cgroup
//! limit; it follows a Plugin pulled from the registry (signed with the
//! key of the ConfigMap the manifest mounts) and converges PodSets; the
//! shard-label webhook the replicas register answers from inside a
//! container (a new PodSet comes back labelled from its create); the
//! replica holding the duties is SIGKILLed and the other takes the duties
//! and every PodSet over; on SIGTERM the last drains and exits cleanly
//! within terminationGracePeriodSeconds; the API server's audit log shows
//! that it created nothing but what its work needs; and a replica whose
//! /cache is not mounted (so it lies on the read-only root) says so, in
//! its log and in the Plugin's status, and still serves its plugins
//! directory.
//!
//! It needs an audit log, endpoint routing for the webhook's Service and
//! no endpoints controller (the test writes the Endpoints as the
//! controller would for ready pods, at addresses of the loopback device),
//! so it starts a control plane of its own.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use kube::{Api, ResourceExt};
use reconciler_host::admission::shard_labels;
use reconciler_host::admission::webhook_configs::DEFAULT_WEBHOOK_PREFIX;
use reconciler_host::engine::shard_selection::SHARD_LABEL;
use reconciler_sdk::KindRef;
use reconciler_tests::container::bundle::{Kept, Pod};
use reconciler_tests::container::probes::Prober;
use reconciler_tests::container::runtime::{Container, PodAddress, pid_inside};
use reconciler_tests::container::{image, kustomize, unavailable};
use reconciler_tests::oci_registry::{Mode, Registry, skip};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite, audit_log_flags};
use reconciler_tests::{example_plugin, root};
use serde_json::{Value, json};

const BINARY: &str = env!("CARGO_BIN_EXE_reconciler-host-under-test");
const SUITE: Suite = Suite {
    name: "container_real_cluster",
    host_binary: BINARY,
};
/// deploy/'s namespace, service account and Deployment.
const NAMESPACE: &str = "reconciler-host";
const NAME: &str = "reconciler-host";
const USER: &str = "system:serviceaccount:reconciler-host:reconciler-host";
const TIMEOUT: Duration = Duration::from_secs(180);
/// The log line of the replica that holds the once-only duties.
const HOLDS_DUTIES: &str = "this replica holds the once-only duties";

#[test]
fn the_image_runs_as_deploy_says_and_a_replica_takes_over() {
    const TEST: &str = "the_image_runs_as_deploy_says_and_a_replica_takes_over";
    if let Some(why) = unavailable() {
        SUITE.skip(
            TEST,
            &why,
            "RECONCILER_E2E=1 cargo test -p reconciler-tests",
        );
        return;
    }
    if skip(SUITE.name, TEST, Mode::Anonymous) {
        return;
    }
    let audit = tempfile::tempdir().expect("a temporary directory");
    // ValidatingAdmissionPolicy is beta on this 1.28 API server: deploy/'s
    // shard fence needs it.
    let flags = format!(
        "{} --enable-aggregator-routing=true --feature-gates=ValidatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true",
        audit_flags(audit.path()).expect("the audit policy")
    );
    SUITE.run_on_own_control_plane(
        TEST,
        &[
            ("APISERVER_EXTRA", flags.as_str()),
            ("KCM_EXTRA", "--controllers=*,-endpoint"),
        ],
        async |cx| containers(cx, audit.path()).await,
    );
}

/// Every write by the host's service account (Metadata level: enough to
/// tell a create, which a server-side apply makes with a patch answered
/// 201 Created).
fn audit_flags(dir: &Path) -> Result<String> {
    audit_log_flags(
        dir,
        &format!("- level: Metadata\n  verbs: [create, patch, update]\n  users: [\"{USER}\"]\n"),
    )
}

/// One replica: its container, its address and the kubelet's prober.
struct Replica {
    name: String,
    container: Container,
    prober: Prober,
    kept: Kept,
    address: PodAddress,
}

async fn containers(cx: &mut RealCluster, audit: &Path) -> Result<()> {
    let registry = Registry::start(Mode::Anonymous);
    let work = cx.workdir().to_path_buf();

    cx.step("1. the image: built, pushed, pinned by digest in deploy/'s kustomization");
    let built = image::build(Path::new(BINARY), &work.join("image"))?;
    let repository = format!("{}/reconciler-host", registry.host);
    image::push(&built, &format!("{repository}:dev"), &work)?;
    let deploy = work.join("deploy");
    copy_dir(&root().join("deploy"), &deploy)?;
    kustomize::set_image(&deploy, "reconciler-host", &repository, &built.digest)?;
    for mut object in kustomize::render(&deploy)? {
        as_served_by_1_28(&mut object);
        apply(cx, &object).await?;
    }
    cx.install_crds(&root().join("crds/podset.yaml")).await?;
    let keys = work.join("signer");
    cx.host_cli(&["keygen", "--output", &keys.display().to_string()])?;
    let public_key = std::fs::read_to_string(keys.with_extension("pub"))?;
    apply(
        cx,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "reconciler-host-trust", "namespace": NAMESPACE},
            "data": {"cosign.pub": public_key}}),
    )
    .await?;
    let plugin_ref = registry.reference("plugins/podset:1");
    cx.host_cli(&[
        "push",
        &example_plugin("podset").display().to_string(),
        &plugin_ref,
        "--insecure-registry",
        &registry.host,
        "--sign-key",
        &keys.with_extension("key").display().to_string(),
    ])?;

    cx.step("2. the kubelet's part: the stored pod template, the image by its digest, runc");
    let deployments = namespaced(cx, "apps", "v1", "Deployment").await?;
    let template = serde_json::to_value(deployments.get(NAME).await?)?["spec"]["template"].clone();
    let image_ref = template["spec"]["containers"][0]["image"]
        .as_str()
        .context("no image in the pod template")?
        .to_string();
    ensure!(
        image_ref == format!("{repository}@{}", built.digest),
        "the stored pod template names {image_ref}, not the pushed image by digest"
    );
    let service_account = service_account_dir(cx, &work).await?;
    let mut replicas = Vec::new();
    for (index, name) in ["reconciler-host-a", "reconciler-host-b"]
        .iter()
        .enumerate()
    {
        let ip = Ipv4Addr::new(10, 200, 0, 1 + index as u8);
        let volumes = volumes(&work.join(name), &public_key, true)?;
        replicas.push(start(
            cx,
            name,
            ip,
            &template,
            &image_ref,
            &service_account,
            &volumes,
        )?);
    }
    for replica in &replicas {
        became_ready(cx, replica).await?;
        check_inside(cx, replica)?;
    }
    set_endpoints(cx, &replicas).await?;

    cx.step("3. a Plugin pulled from the registry, and PodSets converged");
    cx.create(json!({
        "apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin",
        "metadata": {"name": "podset"},
        "spec": {"source": plugin_ref, "insecure": true},
    }))
    .await?;
    wait_for_webhook(cx).await?;
    let mut sizes = BTreeMap::new();
    for (name, size) in [("one", 1), ("two", 2), ("three", 3), ("four", 1)] {
        create_labelled_podset(cx, name, size).await?;
        sizes.insert(name.to_string(), size);
    }
    converged(cx, &sizes).await?;
    let cache = work.join(&replicas[0].name).join("cache");
    ensure!(
        std::fs::read_dir(&cache)?.count() > 0,
        "nothing was written to the cache volume {}",
        cache.display()
    );

    cx.step("4. the replica holding the duties is SIGKILLed; the other takes over");
    let holder = replicas
        .iter()
        .position(|r| !r.container.log_lines_with(&[HOLDS_DUTIES]).is_empty())
        .context("no replica says it holds the duties")?;
    // The replicas' identities end in random suffixes, so in one run of
    // sixteen the holder owns none of the four PodSets and nothing would
    // move: PodSets are added, each with an even chance, until it owns one.
    for extra in 0..8 {
        if !reconciled_podsets(&replicas[holder].container.log()).is_empty() {
            break;
        }
        let name = format!("extra-{extra}");
        create_labelled_podset(cx, &name, 1).await?;
        sizes.insert(name, 1);
        converged(cx, &sizes).await?;
    }
    let mut killed = replicas.remove(holder);
    let owned = reconciled_podsets(&killed.container.log());
    ensure!(
        !owned.is_empty(),
        "{} reconciled no PodSet: nothing would move",
        killed.name
    );
    cx.step(format!("{} reconciled {owned:?}", killed.name));
    killed.container.signal("KILL")?;
    let status = killed.container.wait(Duration::from_secs(10))?;
    cx.step(format!("{} killed ({status})", killed.name));
    drop(killed);
    set_endpoints(cx, &replicas).await?;
    let survivor = &replicas[0];
    wait_for_log(cx, survivor, &[HOLDS_DUTIES]).await?;
    create_labelled_podset(cx, "after-the-kill", 2).await?;
    sizes.insert("after-the-kill".into(), 2);
    for (name, size) in sizes.iter_mut() {
        *size += 1;
        merge_patch_podset(cx, name, *size).await?;
    }
    converged(cx, &sizes).await?;
    ensure!(
        !survivor.prober.would_have_restarted() && survivor.prober.liveness_checks() > 2,
        "{}'s liveness probe failed {} times in a row",
        survivor.name,
        survivor.prober.liveness.failure_threshold
    );
    let created = created_only_what_its_work_needs(audit)?;
    cx.step(format!("created, by resource: {created:?}"));

    cx.step("5. SIGTERM: the survivor drains and exits within terminationGracePeriodSeconds");
    let mut survivor = replicas.remove(0);
    let asked = Instant::now();
    survivor.container.signal("TERM")?;
    let status = survivor.container.wait(survivor.kept.termination_grace)?;
    ensure!(
        status.success(),
        "{} exited with {status} on SIGTERM:\n{}",
        survivor.name,
        survivor.container.log()
    );
    ensure!(
        !survivor
            .container
            .log_lines_with(&["stopped cleanly"])
            .is_empty(),
        "{} did not say it stopped cleanly:\n{}",
        survivor.name,
        survivor.container.log()
    );
    cx.step(format!("exited 0 after {:.1?}", asked.elapsed()));
    drop(survivor);

    cx.step("6. a replica without its /cache volume says so, and serves its plugins directory");
    // memcached as a projected ConfigMap would put it; /cache is then the
    // image's own directory, on the read-only root.
    cx.install_crds(&root().join("crds/memcached.yaml")).await?;
    let name = "reconciler-host-c";
    let volumes = volumes(&work.join(name), &public_key, false)?;
    std::fs::copy(
        example_plugin("memcached"),
        volumes["plugins"].join("memcached.wasm"),
    )?;
    let ip = Ipv4Addr::new(10, 200, 0, 3);
    let uncached = start(
        cx,
        name,
        ip,
        &template,
        &image_ref,
        &service_account,
        &volumes,
    )?;
    became_ready(cx, &uncached).await?;
    wait_for_log(cx, &uncached, &["the compile cache is not used", "/cache"]).await?;
    wait_for_log(
        cx,
        &uncached,
        &["pulled plugins cannot be served: /cache/registry"],
    )
    .await?;
    cx.create(
        json!({"apiVersion": "example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "cache"}, "spec": {"size": 2}}),
    )
    .await?;
    converged(cx, &BTreeMap::from([("cache".to_string(), 2)])).await?;
    let plugins = KindRef::new("reconciler-host.io", "v1alpha1", "Plugin");
    let told = cx
        .wait_for(
            "the Plugin's status to say why it is not served",
            TIMEOUT,
            async || {
                let plugin = cx.must_get(&plugins, "podset").await?;
                let conditions = plugin["status"]["conditions"].to_string();
                Ok(if conditions.contains("/cache/registry") {
                    Probe::Ready(conditions)
                } else {
                    Probe::Pending(conditions)
                })
            },
        )
        .await?;
    cx.step(format!("the Plugin's conditions: {told}"));
    ensure!(
        !uncached.prober.would_have_restarted(),
        "{name}'s liveness probe failed"
    );
    Ok(())
}

fn start(
    cx: &RealCluster,
    name: &str,
    ip: Ipv4Addr,
    template: &Value,
    image_ref: &str,
    service_account: &Path,
    volumes: &BTreeMap<String, PathBuf>,
) -> Result<Replica> {
    let address = PodAddress::add(ip)?;
    let keep = tempfile::tempdir()?;
    let bundle = keep.path().join("bundle");
    image::pull_and_unpack(image_ref, cx.workdir(), &bundle)?;
    let api_port = cx.own_control_plane()?.api_server_address()?.port();
    let kept = Pod {
        name,
        namespace: NAMESPACE,
        ip,
        template,
        api_port,
        service_account,
        volumes,
    }
    .configure(&bundle, "host")?;
    let log = cx.workdir().join(format!("{name}.log"));
    let container = Container::run(name, &bundle, keep, &log)?;
    cx.step(format!("{name}: started at {ip} (log {})", log.display()));
    let prober = Prober::start(ip, kept.liveness.clone(), kept.readiness.clone());
    Ok(Replica {
        name: name.to_string(),
        container,
        prober,
        kept,
        address,
    })
}

/// The directories standing in for the pod's volumes: the projected
/// plugin ConfigMaps (all optional, none exists: empty), the emptyDir
/// cache (made world-writable, as a kubelet makes one) unless `cache` is
/// false, and the trust ConfigMap's key.
fn volumes(dir: &Path, public_key: &str, cache: bool) -> Result<BTreeMap<String, PathBuf>> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut volumes = BTreeMap::new();
    for volume in ["plugins", "cache", "trust"] {
        if volume == "cache" && !cache {
            continue;
        }
        let path = dir.join(volume);
        std::fs::create_dir_all(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))?;
        volumes.insert(volume.to_string(), path);
    }
    std::fs::write(dir.join("trust/cosign.pub"), public_key)?;
    Ok(volumes)
}

/// What the kubelet projects for the pod's service account: a token from
/// the TokenRequest API, the cluster's CA and the namespace.
async fn service_account_dir(cx: &RealCluster, work: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let accounts = namespaced(cx, "", "v1", "ServiceAccount").await?;
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    });
    let answer: Value = accounts
        .create_subresource("token", NAME, &PostParams::default(), &request)
        .await
        .context("a token of deploy/'s service account")?;
    let dir = work.join("serviceaccount");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("token"),
        answer["status"]["token"].as_str().context("no token")?,
    )?;
    std::fs::copy(
        cx.own_control_plane()?.state_dir().join("pki/ca.crt"),
        dir.join("ca.crt"),
    )?;
    std::fs::write(dir.join("namespace"), NAMESPACE)?;
    // A projected volume's default mode: readable by the container's user.
    for file in ["token", "ca.crt", "namespace"] {
        std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(dir)
}

async fn became_ready(cx: &RealCluster, replica: &Replica) -> Result<()> {
    cx.wait_for(&format!("{} ready", replica.name), TIMEOUT, async || {
        replica.container.running()?;
        Ok(if replica.prober.ready() {
            Probe::Ready(())
        } else {
            Probe::Pending(last_line(&replica.container.log()))
        })
    })
    .await
    .with_context(|| replica.container.log())
}

/// PID 1, and the guest memory budget from the cgroup's limit.
fn check_inside(cx: &RealCluster, replica: &Replica) -> Result<()> {
    let pid = replica.container.pid()?;
    ensure!(
        pid_inside(pid)? == 1,
        "{}'s host is not PID 1 in its container",
        replica.name
    );
    let budget = format!("budget_mib={}", (replica.kept.memory_limit_bytes / 2) >> 20);
    ensure!(
        !replica.container.log_lines_with(&[&budget]).is_empty(),
        "{} did not derive its guest memory budget ({budget}) from the cgroup limit:\n{}",
        replica.name,
        replica.container.log()
    );
    cx.step(format!("{}: PID 1, {budget}", replica.name));
    Ok(())
}

async fn wait_for_log(cx: &RealCluster, replica: &Replica, needles: &[&str]) -> Result<()> {
    cx.wait_for(
        &format!("{} to log {needles:?}", replica.name),
        TIMEOUT,
        async || {
            replica.container.running()?;
            Ok(if replica.container.log_lines_with(needles).is_empty() {
                Probe::Pending(last_line(&replica.container.log()))
            } else {
                Probe::Ready(())
            })
        },
    )
    .await
}

/// The PodSets a replica's log says it reconciled.
fn reconciled_podsets(log: &str) -> std::collections::BTreeSet<String> {
    log.lines()
        .filter_map(|l| l.split("engine::record: podset PodSet ").nth(1))
        .filter_map(|rest| rest.split(':').next()?.rsplit('/').next())
        .map(str::to_string)
        .collect()
}

fn last_line(log: &str) -> String {
    log.lines()
        .last()
        .unwrap_or("(nothing logged yet)")
        .to_string()
}

/// The Service's Endpoints, as the endpoints controller writes them for
/// the ready pods.
async fn set_endpoints(cx: &RealCluster, replicas: &[Replica]) -> Result<()> {
    let addresses: Vec<Value> = replicas
        .iter()
        .map(|r| json!({"ip": r.address.0.to_string(), "targetRef": {"kind": "Pod", "name": r.name, "namespace": NAMESPACE}}))
        .collect();
    apply(
        cx,
        &json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "subsets": [{"addresses": addresses, "ports": [
                {"name": "metrics", "port": 8444}, {"name": "webhooks", "port": 8443}]}]}),
    )
    .await
}

/// Waits until the shard-label webhook labels a PodSet: registered, its
/// rules naming PodSets, and taken up by the API server, which reads
/// webhook configurations through an informer of its own and so starts
/// calling a new one a moment after it is stored. A dry-run create goes
/// through admission without storing anything.
async fn wait_for_webhook(cx: &RealCluster) -> Result<()> {
    let name = shard_labels::configuration_name(DEFAULT_WEBHOOK_PREFIX);
    let api = cx
        .api(&KindRef::new("example.com", "v1alpha1", "PodSet"))
        .await?;
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "webhook-probe"}, "spec": {"size": 1}}))?;
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    cx.wait_for(
        &format!("the webhook configuration {name} to label a PodSet"),
        TIMEOUT,
        async || {
            Ok(match api.create(&params, &probe).await {
                Ok(created) if created.labels().contains_key(SHARD_LABEL) => Probe::Ready(()),
                Ok(_) => Probe::Pending("a dry-run create came back unlabelled".into()),
                Err(e) => Probe::Pending(format!("a dry-run create failed: {e}")),
            })
        },
    )
    .await
}

/// A PodSet whose create comes back with its shard label: the webhook
/// answered from inside a container.
async fn create_labelled_podset(cx: &RealCluster, name: &str, size: i64) -> Result<()> {
    let created = cx
        .create(
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": name}, "spec": {"size": size}}),
        )
        .await?;
    ensure!(
        created["metadata"]["labels"][SHARD_LABEL].is_string(),
        "PodSet {name} came back from its create without {SHARD_LABEL}: the webhook did not answer: {}",
        created["metadata"]
    );
    Ok(())
}

async fn merge_patch_podset(cx: &RealCluster, name: &str, size: i64) -> Result<()> {
    cx.merge_patch(
        &KindRef::new("example.com", "v1alpha1", "PodSet"),
        name,
        json!({"spec": {"size": size}}),
    )
    .await?;
    Ok(())
}

async fn converged(cx: &RealCluster, sizes: &BTreeMap<String, i64>) -> Result<()> {
    let deployments = KindRef::new("apps", "v1", "Deployment");
    cx.wait_for(
        "every Deployment at its PodSet's size",
        TIMEOUT,
        async || {
            for (name, size) in sizes {
                match cx.get(&deployments, name).await? {
                    Some(d) if d["spec"]["replicas"] == *size => {}
                    Some(d) => {
                        return Ok(Probe::Pending(format!(
                            "{name}: replicas {} of {size}",
                            d["spec"]["replicas"]
                        )));
                    }
                    None => return Ok(Probe::Pending(format!("{name}: no Deployment yet"))),
                }
            }
            Ok(Probe::Ready(()))
        },
    )
    .await
}

/// What the host's service account created, by resource, from the audit
/// log: only what its work needs.
fn created_only_what_its_work_needs(audit: &Path) -> Result<BTreeMap<String, usize>> {
    const NEEDED: [&str; 10] = [
        // the ring's and the duties' Leases
        "leases",
        // the shard fence's map of writers, and each replica asking who
        // it is for it
        "configmaps",
        "selfsubjectreviews",
        "events",
        // the PodSets' children
        "deployments",
        // the admission certificate
        "secrets",
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        // TokenReview and SubjectAccessReview of callers of /metrics
        "tokenreviews",
        "subjectaccessreviews",
    ];
    let text = std::fs::read_to_string(audit.join("audit.log"))?;
    let mut created: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)?;
        if entry["verb"] != "create" && entry["responseStatus"]["code"] != 201 {
            continue;
        }
        let resource = entry["objectRef"]["resource"].as_str().unwrap_or("?");
        let subresource = entry["objectRef"]["subresource"].as_str();
        let key = match subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        };
        *created.entry(key).or_default() += 1;
    }
    let surprises: Vec<_> = created
        .keys()
        .filter(|k| !NEEDED.contains(&k.as_str()))
        .collect();
    if !surprises.is_empty() {
        bail!("the host created what its work does not need: {surprises:?} (all: {created:?})");
    }
    ensure!(
        created.contains_key("deployments"),
        "no create audited: {created:?}"
    );
    Ok(created)
}

async fn namespaced(
    cx: &RealCluster,
    group: &str,
    version: &str,
    kind: &str,
) -> Result<Api<DynamicObject>> {
    let (resource, _) =
        pinned_kind(&cx.client, &GroupVersionKind::gvk(group, version, kind)).await?;
    Ok(Api::namespaced_with(
        cx.client.clone(),
        NAMESPACE,
        &resource,
    ))
}

/// deploy/'s shard fence is admissionregistration.k8s.io/v1 (Kubernetes
/// 1.30 and later); this 1.28 API server serves the same objects as
/// v1beta1, as `rbac --write-fence --write-fence-api-version v1beta1`
/// would write them.
fn as_served_by_1_28(object: &mut Value) {
    let policy = object["kind"]
        .as_str()
        .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"));
    if policy && object["apiVersion"] == "admissionregistration.k8s.io/v1" {
        object["apiVersion"] = "admissionregistration.k8s.io/v1beta1".into();
    }
}

/// Server-side apply of one manifest, in its own namespace if it names
/// one, as `kubectl apply --server-side` would; retried while its kind is
/// not served yet (a CRD applied just before).
async fn apply(cx: &RealCluster, object: &Value) -> Result<()> {
    let kind = KindRef::of_object(object).context("a manifest without apiVersion and kind")?;
    let name = object["metadata"]["name"]
        .as_str()
        .context("no metadata.name")?;
    let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    let deadline = Instant::now() + TIMEOUT;
    let (resource, capabilities) = loop {
        match pinned_kind(&cx.client, &gvk).await {
            Ok(found) => break found,
            Err(e) if Instant::now() < deadline => {
                cx.step(format!("waiting for {} to be served: {e}", kind.kind));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context(format!("{} is not served", kind.kind)),
        }
    };
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) if capabilities.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(cx.client.clone(), ns, &resource)
        }
        _ => Api::all_with(cx.client.clone(), &resource),
    };
    api.patch(
        name,
        &PatchParams::apply("kubectl").force(),
        &Patch::Apply(object),
    )
    .await
    .with_context(|| format!("applying {} {name}", kind.kind))?;
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}
