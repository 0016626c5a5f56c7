//! The host under the faults a real cluster has: an API server that dies
//! and comes back, watches whose history etcd compacted away (410 Gone),
//! and a service account holding exactly the RBAC that `reconciler-host
//! rbac` generates, then one rule less. `reconciler-host run` with the
//! compiled podset plugin, checked by what a user sees: each PodSet's
//! Deployment and `status.podNames`.
//!
//! Killing the API server and compacting etcd would pull the cluster from
//! under every other test, so that test starts a control plane of its own
//! with `../shared/kube` (about 8 s; skipped without the script, whatever
//! `KUBECONFIG` says). The RBAC tests use the cluster of `KUBECONFIG`, each
//! in a namespace of its own, with a ClusterRole and ClusterRoleBinding
//! named after it and deleted at the end.
//!
//! ```text
//! scripts/build-plugins
//! eval "$(../shared/kube/kube up)"     # for the RBAC tests
//! RECONCILER_E2E=1 cargo test -p reconciler-tests --test real_cluster_faults -- --nocapture
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use kube::api::{ListParams, PostParams};
use reconciler_sdk::KindRef;
use reconciler_tests::real_cluster::{
    Probe, RealCluster, SeverableLink, Suite, controller_of, kubeconfig, uid_of,
};
use reconciler_tests::{example_plugin, root};
use serde::Deserialize as _;
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "real_cluster_faults",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// Reconciles, the controller-manager's ReplicaSets and Pods, and the
/// host's watches coming back after a failure (kube's backoff grows to a
/// few seconds): seconds; the margin is for a loaded CI machine.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a converged state must hold: a late write of the host's (a
/// Deployment put back for a PodSet it wrongly still believes in, a stale
/// status) shows within this time.
const SETTLE: Duration = Duration::from_secs(3);
/// Long enough for the host to have acted on a change had it seen it.
const UNSEEN_FOR: Duration = Duration::from_secs(2);
/// While the API server is down: the host's requests and watches fail.
const OUTAGE: Duration = Duration::from_secs(3);

/// What the host says of a request refused for want of an RBAC rule.
const RBAC_REFUSAL: &str = "lacks RBAC permission";
/// The service account the RBAC tests run the host as.
const HOST_ACCOUNT: &str = "reconciler-host";

fn podsets() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "PodSet")
}

fn deployments() -> KindRef {
    KindRef::new("apps", "v1", "Deployment")
}

fn pods() -> KindRef {
    KindRef::new("", "v1", "Pod")
}

fn podset(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
           "metadata": {"name": name}, "spec": {"size": size}})
}

async fn resize(cx: &RealCluster, name: &str, size: i64) -> Result<()> {
    cx.merge_patch(&podsets(), name, json!({"spec": {"size": size}}))
        .await?;
    cx.step(format!("resized PodSet {name} to {size}"));
    Ok(())
}

/// What a user expects of the namespace: these PodSets with these sizes,
/// and no other.
#[derive(Clone, Default)]
struct Expected {
    sizes: BTreeMap<String, i64>,
}

impl Expected {
    fn set(&mut self, name: &str, size: i64) {
        self.sizes.insert(name.to_string(), size);
    }

    fn remove(&mut self, name: &str) {
        self.sizes.remove(name);
    }
}

/// Why the namespace is not yet as `expected`, or `None` once it is: each
/// PodSet has one Deployment, controlled by it (by uid: a PodSet deleted
/// and created again owns a new one), with its size; its `status.podNames`
/// are exactly the Pods carrying its label; and no other Deployment exists
/// (no duplicate, none left of a deleted PodSet).
async fn divergence(cx: &RealCluster, expected: &Expected) -> Result<Option<String>> {
    let mut podsets_by_name = BTreeMap::new();
    for podset in cx
        .api(&podsets())
        .await?
        .list(&ListParams::default())
        .await?
    {
        let podset = serde_json::to_value(podset)?;
        let name = podset["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        podsets_by_name.insert(name, podset);
    }
    let names: BTreeSet<&String> = podsets_by_name.keys().collect();
    let wanted: BTreeSet<&String> = expected.sizes.keys().collect();
    if names != wanted {
        bail!("the test's own PodSets are {names:?}, not {wanted:?}");
    }
    let mut deployments_by_name = BTreeMap::new();
    for deployment in cx
        .api(&deployments())
        .await?
        .list(&ListParams::default())
        .await?
    {
        let deployment = serde_json::to_value(deployment)?;
        let name = deployment["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        deployments_by_name.insert(name, deployment);
    }
    let extra: Vec<&String> = deployments_by_name
        .keys()
        .filter(|d| !expected.sizes.contains_key(*d))
        .collect();
    if !extra.is_empty() {
        return Ok(Some(format!("Deployments of no PodSet: {extra:?}")));
    }
    for (name, size) in &expected.sizes {
        let podset = &podsets_by_name[name];
        let Some(deployment) = deployments_by_name.get(name) else {
            return Ok(Some(format!("PodSet {name}: no Deployment")));
        };
        let owner = uid_of(podset)?;
        match controller_of(deployment)? {
            Some(c) if c.uid == owner => {}
            other => {
                return Ok(Some(format!(
                    "Deployment {name}: controller {:?}, not PodSet {name} (uid {owner})",
                    other.map(|c| format!("{} {} uid {}", c.kind, c.name, c.uid))
                )));
            }
        }
        if deployment["spec"]["replicas"] != *size {
            return Ok(Some(format!(
                "Deployment {name}: {} replicas, not {size}",
                deployment["spec"]["replicas"]
            )));
        }
        let mut pod_names: Vec<String> = cx
            .api(&pods())
            .await?
            .list_metadata(&ListParams::default().labels(&format!("podset={name}")))
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect();
        pod_names.sort();
        if i64::try_from(pod_names.len()).ok() != Some(*size) {
            return Ok(Some(format!(
                "PodSet {name}: {} Pods so far, not {size}",
                pod_names.len()
            )));
        }
        let reported = &podset["status"]["podNames"];
        if *reported != json!(pod_names) {
            return Ok(Some(format!(
                "PodSet {name}: status.podNames {reported}, the Pods are {pod_names:?}"
            )));
        }
    }
    Ok(None)
}

/// Waits until the namespace is as `expected`, then checks it stays so for
/// [`SETTLE`]. A request of the host's refused for want of RBAC ends the
/// wait at once: it cannot converge, and that line says why.
async fn converge(cx: &RealCluster, expected: &Expected) -> Result<()> {
    let what = format!("the PodSets {:?} to converge", expected.sizes);
    let host = cx.host()?;
    cx.wait_for(&what, CONVERGE_TIMEOUT, async || {
        if let Some(refused) = host.log_lines_with(&[RBAC_REFUSAL]).first() {
            bail!("the host was refused a request: {refused}");
        }
        Ok(match divergence(cx, expected).await? {
            None => Probe::Ready(()),
            Some(seen) => Probe::Pending(seen),
        })
    })
    .await?;
    tokio::time::sleep(SETTLE).await;
    if let Some(seen) = divergence(cx, expected).await? {
        bail!(
            "the PodSets {:?} converged, then {} s later: {seen}",
            expected.sizes,
            SETTLE.as_secs()
        );
    }
    cx.host()?.ensure_running()?;
    cx.step(format!("converged: {:?}", expected.sizes));
    Ok(())
}

/// Waits for a line of the host's log containing all of `needles`, beyond
/// the first `seen` such lines.
async fn wait_for_new_log_line(
    cx: &RealCluster,
    needles: &[&str],
    seen: usize,
    timeout: Duration,
) -> Result<String> {
    let host = cx.host()?;
    cx.wait_for(
        &format!("a new line of the host's log with {needles:?}"),
        timeout,
        async || {
            let lines = host.log_lines_with(needles);
            Ok(match lines.get(seen) {
                Some(line) => Probe::Ready(line.clone()),
                None => Probe::Pending(format!("{} such lines, as before", lines.len())),
            })
        },
    )
    .await
}

/// Points 2e and 2d: the API server killed (SIGKILL) and started again
/// while the host runs, then every connection of the host cut while
/// objects change and etcd's history is compacted, so that its watches
/// come back to 410 Gone. The host keeps running throughout (every wait
/// fails at once if it exits), every PodSet, including those created,
/// resized and deleted meanwhile, ends as it should, with one Deployment
/// each, and the host still stops cleanly (SIGTERM, exit code 0).
///
/// One control plane for both, in that order: `kube up` after the kill
/// restarts the controller-manager too, whose garbage collector then knows
/// the PodSet kind at once (one started before the CRD existed takes ~40 s
/// to notice it), so Deployments of PodSets deleted in the second part go
/// at once.
///
/// The API server runs without its watch cache, as the cache would answer
/// a resumed watch from its own history whatever etcd compacted.
#[test]
fn the_host_converges_across_an_api_server_restart_and_compacted_watches() {
    SUITE.run_on_own_control_plane(
        "the_host_converges_across_an_api_server_restart_and_compacted_watches",
        &[("APISERVER_EXTRA", "--watch-cache=false")],
        async |cx| {
            // The host reaches the API server through a relay the test can
            // cut; the test's own client does not.
            let link = SeverableLink::start(cx.own_control_plane()?.api_server_address()?)?;
            let host_kubeconfig = cx.workdir().join("host-kubeconfig");
            kubeconfig::with_server(cx.kubeconfig(), &link.url(), &host_kubeconfig)?;
            cx.install_crds(&root().join("crds/podset.yaml")).await?;
            cx.start_host_with_kubeconfig(&[example_plugin("podset")], &host_kubeconfig)?;

            let mut expected = Expected::default();
            api_server_restart(cx, &link, &mut expected).await?;
            compacted_watches(cx, &link, &mut expected).await?;
            // Stopped while the relay still runs: a clean exit, code 0.
            cx.stop_host().await?;
            Ok(())
        },
    );
}

/// Point 2e: changes just before the API server dies (which the host may
/// or may not have seen), the API server down for a while, then started
/// again, then more changes.
async fn api_server_restart(
    cx: &RealCluster,
    link: &SeverableLink,
    expected: &mut Expected,
) -> Result<()> {
    cx.step("part 1: the API server is killed and started again");
    for (name, size) in [("alpha", 1), ("beta", 2)] {
        cx.create(podset(name, size)).await?;
        expected.set(name, size);
    }
    converge(cx, expected).await?;
    let watch_failures = cx.host()?.log_lines_with(&["watch failed"]).len();

    resize(cx, "alpha", 2).await?;
    expected.set("alpha", 2);
    cx.create(podset("gamma", 1)).await?;
    expected.set("gamma", 1);
    let plane = cx.own_control_plane()?;
    plane.kill("kube-apiserver")?;
    cx.step("killed kube-apiserver (SIGKILL)");
    tokio::time::sleep(OUTAGE).await;
    cx.host()?.ensure_running()?;
    plane.up_again()?;
    link.set_upstream(plane.api_server_address()?);
    cx.step("kube up started the control plane again (etcd's data kept)");
    cx.host()?.ensure_running()?;

    cx.create(podset("delta", 1)).await?;
    expected.set("delta", 1);
    resize(cx, "beta", 3).await?;
    expected.set("beta", 3);
    cx.delete(&podsets(), "gamma").await?;
    expected.remove("gamma");
    cx.step("deleted PodSet gamma");

    let line =
        wait_for_new_log_line(cx, &["watch failed"], watch_failures, CONVERGE_TIMEOUT).await?;
    cx.step(format!("the host noticed: {line}"));
    converge(cx, expected).await
}

/// Point 2d: the host cut off from the API server while PodSets are
/// created, resized, deleted, and deleted and created again under the same
/// name, and the Pods of one are replaced; etcd compacted past all of it;
/// the host reconnected. Its watches cannot resume (410 Gone), so it must
/// list again and find every change, deletions included, which no watch
/// event will ever tell it: a deleted Pod it still believed in would stay
/// in its PodSet's `status.podNames`.
async fn compacted_watches(
    cx: &RealCluster,
    link: &SeverableLink,
    expected: &mut Expected,
) -> Result<()> {
    cx.step("part 2: the host's watches expire (410 Gone) while it is cut off");
    let before = [
        ("kept", 1),
        ("resized", 1),
        ("doomed", 1),
        ("reborn", 1),
        ("respawned", 2),
    ];
    for (name, size) in before {
        cx.create(podset(name, size)).await?;
        expected.set(name, size);
    }
    converge(cx, expected).await?;
    let old_reborn = uid_of(&cx.must_get(&podsets(), "reborn").await?)?;
    let expiries = cx.host()?.log_lines_with(&["watch failed", "410"]).len();

    link.sever();
    cx.step("cut every connection of the host to the API server");
    cx.create(podset("born", 2)).await?;
    expected.set("born", 2);
    resize(cx, "resized", 3).await?;
    expected.set("resized", 3);
    cx.delete(&podsets(), "doomed").await?;
    expected.remove("doomed");
    cx.delete(&podsets(), "reborn").await?;
    cx.wait_for("PodSet reborn to be gone", CONVERGE_TIMEOUT, async || {
        Ok(match cx.get(&podsets(), "reborn").await? {
            None => Probe::Ready(()),
            Some(p) => Probe::Pending(format!("still there: {}", p["metadata"])),
        })
    })
    .await?;
    let reborn = cx.create(podset("reborn", 2)).await?;
    expected.set("reborn", 2);
    ensure!(
        uid_of(&reborn)? != old_reborn,
        "PodSet reborn was created again with its old uid"
    );
    cx.step("deleted PodSets doomed and reborn, created reborn again (new uid)");
    let pod_api = cx.api(&pods()).await?;
    let respawned = pod_api
        .list_metadata(&ListParams::default().labels("podset=respawned"))
        .await?
        .items;
    for pod in &respawned {
        if let Some(name) = &pod.metadata.name {
            cx.delete(&pods(), name).await?;
        }
    }
    cx.step(format!(
        "deleted the {} Pods of PodSet respawned (its ReplicaSet makes new ones)",
        respawned.len()
    ));

    // The gap is real: the host acted on none of it.
    tokio::time::sleep(UNSEEN_FOR).await;
    ensure!(
        cx.get(&deployments(), "born").await?.is_none(),
        "the host created Deployment born while it was cut off from the API server"
    );
    let resized = cx.must_get(&deployments(), "resized").await?;
    ensure!(
        resized["spec"]["replicas"] == 1,
        "the host resized Deployment resized while it was cut off: {}",
        resized["spec"]
    );

    let plane = cx.own_control_plane()?;
    let revision = plane.etcd_revision()?;
    plane.compact_etcd(revision)?;
    cx.step(format!("compacted etcd at revision {revision}"));
    link.restore();
    cx.step("the host can reach the API server again");

    let line =
        wait_for_new_log_line(cx, &["watch failed", "410"], expiries, CONVERGE_TIMEOUT).await?;
    cx.step(format!("the host's watch expired: {line}"));
    converge(cx, expected).await
}

/// Which RBAC `reconciler-host rbac` is asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RbacForm {
    /// One ClusterRole with everything.
    ClusterRole,
    /// `--namespace`: a Role and RoleBinding in the test's namespace, and a
    /// ClusterRole with what is cluster-wide.
    NamespacedRoles,
}

/// The YAML documents of `text`.
fn documents(text: &str) -> Result<Vec<Value>> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).context("parsing the output of reconciler-host rbac"))
        .filter(|d| !matches!(d, Ok(Value::Null)))
        .collect()
}

/// Runs `reconciler-host rbac` for a directory holding only podset.wasm,
/// with the project's CRDs; the documents it prints.
fn generate_rbac(cx: &RealCluster, form: RbacForm, name: &str) -> Result<Vec<Value>> {
    let plugins = cx.workdir().join("rbac-plugins");
    std::fs::create_dir_all(&plugins)?;
    std::fs::copy(example_plugin("podset"), plugins.join("podset.wasm"))?;
    let mut rbac = cx.host_command();
    rbac.arg("rbac")
        .arg("--plugins-dir")
        .arg(&plugins)
        .arg("--crds")
        .arg(root().join("crds"))
        .arg("--name")
        .arg(name);
    // The Lease is granted by a Role in the service account's namespace.
    rbac.args(["--service-account", HOST_ACCOUNT])
        .args(["--service-account-namespace", &cx.namespace]);
    if form == RbacForm::NamespacedRoles {
        rbac.args(["--namespace", &cx.namespace]);
        // Plugin resources would add a Role in `default` (their Events go
        // there), which a test must not create on a shared cluster: this
        // form's host runs without them (--no-plugin-resources).
        rbac.arg("--no-plugin-resources");
    }
    let output = rbac.output().context("running reconciler-host rbac")?;
    ensure!(
        output.status.success(),
        "reconciler-host rbac failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).context("reconciler-host rbac printed no text")?;
    cx.step(format!("reconciler-host rbac ({form:?}) printed:\n{text}"));
    documents(&text)
}

/// Whether the API server lets the host's service account `verb`
/// `group`/`resource` in the test's namespace, as it would answer the host.
async fn allowed(cx: &RealCluster, verb: &str, group: &str, resource: &str) -> Result<bool> {
    let reviews = cx
        .api(&KindRef::new(
            "authorization.k8s.io",
            "v1",
            "SubjectAccessReview",
        ))
        .await?;
    let ns = &cx.namespace;
    let review: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "metadata": {},
        "spec": {
            "user": format!("system:serviceaccount:{ns}:{HOST_ACCOUNT}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"),
                       "system:authenticated"],
            "resourceAttributes": {"namespace": ns, "verb": verb, "group": group,
                                   "resource": resource},
        },
    }))?;
    let answer = serde_json::to_value(
        reviews
            .create(&PostParams::default(), &review)
            .await
            .context("creating a SubjectAccessReview")?,
    )?;
    Ok(answer["status"]["allowed"] == true)
}

/// `rules` without `verb` on `group`/`resource`; other resources of the
/// same rule keep it. Fails if no rule granted it.
fn without_verb(rules: &Value, group: &str, resource: &str, verb: &str) -> Result<Value> {
    let mut out = Vec::new();
    let mut found = false;
    for rule in rules.as_array().context("rules is not a list")? {
        let grants = |field: &str, value: &str| {
            rule[field]
                .as_array()
                .is_some_and(|values| values.iter().any(|v| v == value))
        };
        if !(grants("apiGroups", group) && grants("resources", resource) && grants("verbs", verb)) {
            out.push(rule.clone());
            continue;
        }
        found = true;
        let others: Vec<&Value> = rule["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| *r != resource)
            .collect();
        if !others.is_empty() {
            let mut rest = rule.clone();
            rest["resources"] = json!(others);
            out.push(rest);
        }
        let verbs: Vec<&Value> = rule["verbs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| *v != verb)
            .collect();
        let mut narrowed = rule.clone();
        narrowed["resources"] = json!([resource]);
        narrowed["verbs"] = json!(verbs);
        out.push(narrowed);
    }
    ensure!(
        found,
        "no rule grants {verb} on {resource} in API group {group:?}: {rules}"
    );
    Ok(json!(out))
}

/// Point 2g: the host as a service account bound to exactly what
/// `reconciler-host rbac` generates runs the podset plugin (Deployment and
/// status, no permission error); with `patch` on Deployments taken away,
/// a PodSet's reconcile fails and its Warning Event names that rule.
async fn least_privilege(cx: &mut RealCluster, form: RbacForm) -> Result<()> {
    cx.install_crds(&root().join("crds/podset.yaml")).await?;
    // Cluster-scoped names are shared by every test: the namespace's own
    // (server-generated) name makes them unique.
    let name = format!("{}-host", cx.namespace);
    let manifests = generate_rbac(cx, form, &name)?;
    let kinds: Vec<String> = manifests
        .iter()
        .map(|m| {
            format!(
                "{} {}",
                m["kind"].as_str().unwrap_or("?"),
                m["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect();
    // The Role holds the namespaced kinds with --namespace, and the Lease
    // in either form.
    let wanted: Vec<String> = vec![
        format!("ClusterRole {name}"),
        format!("Role {name}"),
        format!("RoleBinding {name}"),
    ];
    ensure!(
        kinds == wanted,
        "reconciler-host rbac ({form:?}) should print {wanted:?}; it printed {kinds:?}"
    );

    cx.create(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": HOST_ACCOUNT}}))
        .await?;
    for manifest in &manifests {
        if let Some(namespace) = manifest["metadata"]["namespace"].as_str() {
            ensure!(
                namespace == cx.namespace,
                "reconciler-host rbac put {} in namespace {namespace}, not the test's",
                manifest["kind"]
            );
        }
        cx.create(manifest.clone()).await?;
    }
    // The generated RoleBindings name the account; the ClusterRole is bound
    // by the user, as deploy/cluster-role-binding.yaml does.
    cx.create(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": HOST_ACCOUNT,
                      "namespace": cx.namespace}],
    }))
    .await?;
    let token = cx.service_account_token(HOST_ACCOUNT).await?;
    let host_kubeconfig = cx.workdir().join("service-account-kubeconfig");
    kubeconfig::with_token(cx.kubeconfig(), &token, &host_kubeconfig)?;
    // The host runs as the service account of cx.namespace, outside a
    // pod: it is told that namespace, as a pod's POD_NAMESPACE would.
    let namespace = cx.namespace.clone();
    let mut host_args = vec!["--cluster-secrets-namespace", namespace.as_str()];
    if form == RbacForm::NamespacedRoles {
        host_args.push("--no-plugin-resources");
    }
    cx.start_host_with_kubeconfig_and_args(
        &[example_plugin("podset")],
        &host_kubeconfig,
        &host_args,
    )?;

    let mut expected = Expected::default();
    cx.create(podset("web", 2)).await?;
    expected.set("web", 2);
    converge(cx, &expected).await?;
    let refused: Vec<String> = cx
        .host()?
        .log_text()
        .lines()
        .filter(|l| {
            let lower = l.to_lowercase();
            lower.contains("forbidden") || l.contains(RBAC_REFUSAL)
        })
        .map(str::to_string)
        .collect();
    ensure!(
        refused.is_empty(),
        "the host, bound to what reconciler-host rbac generated, was refused requests: {refused:#?}"
    );
    let web_warnings: Vec<String> = cx
        .events_about("PodSet", "web")
        .await?
        .into_iter()
        .filter(|e| e.event_type == "Warning")
        .map(|e| e.to_string())
        .collect();
    ensure!(
        web_warnings.is_empty(),
        "Warning Events about PodSet web: {web_warnings:?}"
    );

    // One rule less: patch on Deployments, which every apply needs.
    let role_kind = match form {
        RbacForm::ClusterRole => KindRef::new("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        RbacForm::NamespacedRoles => KindRef::new("rbac.authorization.k8s.io", "v1", "Role"),
    };
    let role = cx.must_get(&role_kind, &name).await?;
    let rules = without_verb(&role["rules"], "apps", "deployments", "patch")?;
    cx.merge_patch(&role_kind, &name, json!({"rules": rules}))
        .await?;
    cx.step(format!(
        "removed verb patch on deployments from {} {name}",
        role_kind.kind
    ));
    // The authorizer follows RBAC objects through a watch: wait until it
    // answers as the host will be answered.
    cx.wait_for(
        "the API server to refuse patch on deployments to the host's account",
        CONVERGE_TIMEOUT,
        async || {
            Ok(if allowed(cx, "patch", "apps", "deployments").await? {
                Probe::Pending("still allowed".to_string())
            } else {
                Probe::Ready(())
            })
        },
    )
    .await?;

    cx.create(podset("denied", 1)).await?;
    let rule = format!(
        "the service account {RBAC_REFUSAL} for verb \"patch\" on resource \
         \"deployments\" in API group \"apps\" in namespace \"{}\"",
        cx.namespace
    );
    let event = cx
        .wait_for_warning("PodSet", "denied", &[&rule], CONVERGE_TIMEOUT, async || {
            Ok(cx.get(&deployments(), "denied").await?.map(|_| {
                "Deployment denied exists: the host patched it without the rule".to_string()
            }))
        })
        .await?;
    ensure!(
        event.reason == "Forbidden",
        "the refusal's reason should be Forbidden: {event}"
    );
    cx.step(format!("the Warning Event: {event}"));
    ensure!(
        cx.get(&deployments(), "denied").await?.is_none(),
        "Deployment denied exists although patch on deployments was not granted"
    );
    Ok(())
}

/// Point 2g, the cluster-wide form: one ClusterRole.
#[test]
fn the_host_runs_on_exactly_the_generated_cluster_role() {
    SUITE.run(
        "the_host_runs_on_exactly_the_generated_cluster_role",
        async |cx| least_privilege(cx, RbacForm::ClusterRole).await,
    );
}

/// Point 2g, the namespaced form (`rbac --namespace`): a Role and
/// RoleBinding in the namespace the host serves.
#[test]
fn the_host_runs_on_exactly_the_generated_namespaced_roles() {
    SUITE.run(
        "the_host_runs_on_exactly_the_generated_namespaced_roles",
        async |cx| least_privilege(cx, RbacForm::NamespacedRoles).await,
    );
}
