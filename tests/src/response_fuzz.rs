//! Arbitrary responses against arbitrary observed state, through the real
//! host: the compiled hostile plugin in mode `scripted` returns whatever
//! response a case spells out, the engine validates, plans and applies it
//! to the embedded cluster, and the cluster is compared before and after.
//!
//! The invariants, whatever the plugin returns:
//! 1. the host does not panic;
//! 2. nothing outside what the plugin declared changes: no object in
//!    another namespace, none of an undeclared kind; an object of an owned
//!    kind changes only if this primary controlled it already (or it is
//!    new); an object of a written kind may be made or patched but never
//!    goes away; the primary itself changes only in its status;
//! 3. a response refused before anything was applied changes nothing at
//!    all (a failure that is not reported as a partial apply).
//!
//! [`Fuzzer::check`] is one case from raw bytes: the bounded run in the
//! test suite (`tests/tests/response_fuzz.rs`) feeds it bytes from a seeded
//! generator, and any byte source (a coverage-guided fuzzer) can drive it.

use std::collections::BTreeMap;
use std::sync::Arc;

use arbitrary::{Result as ArbResult, Unstructured};
use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::{ObjectKey, VirtualClock};
use reconciler_host::engine::work_queue::PrimaryKey;
use reconciler_host::engine::{Engine, Outcome};
use reconciler_host::plugin::LoadedPlugin;
use serde_json::{Value, json};

/// The primary's namespace, and one the plugin must never reach.
const NS: &str = "arena";
const OTHER_NS: &str = "elsewhere";
const PRIMARY: &str = "p";
const SIBLING: &str = "sib";
const FINALIZER: &str = "hostile.example.com/cleanup";

/// Kinds a case draws from: (apiVersion, kind). The hostile plugin owns
/// ConfigMaps, writes ServiceAccounts, reads Pods; the rest it never
/// declared.
const KINDS: &[(&str, &str)] = &[
    ("v1", "ConfigMap"),
    ("v1", "ServiceAccount"),
    ("v1", "Pod"),
    ("v1", "Secret"),
    ("hostile.example.com/v1", "Hostile"),
    ("v1", "Namespace"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("apps/v1", "Deployment"),
    ("", "ConfigMap"),
    ("v1/extra", "ConfigMap"),
];
const NAMES: &[&str] = &["a", "b", PRIMARY, SIBLING, "Not_A_Name", "", "x.y-z"];

/// One violated invariant, with what the case was.
#[derive(Debug)]
pub struct Violation(pub String);

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Runs cases with one loaded plugin and one runtime.
pub struct Fuzzer {
    plugin: Arc<LoadedPlugin>,
    runtime: tokio::runtime::Runtime,
}

impl Fuzzer {
    /// Loads `hostile.wasm` (built by scripts/build-plugins).
    pub fn new() -> Self {
        let plugin = Arc::new(crate::load(&crate::test_plugin("hostile")));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        Self { plugin, runtime }
    }

    /// One case from `data`. Data too short for a whole case is fine: the
    /// rest is taken as empty.
    pub fn check(&self, data: &[u8]) -> Result<(), Violation> {
        let mut u = Unstructured::new(data);
        let Ok(case) = Case::arbitrary(&mut u) else {
            return Ok(());
        };
        self.runtime.block_on(run(self.plugin.clone(), case))
    }
}

impl Default for Fuzzer {
    fn default() -> Self {
        Self::new()
    }
}

/// What the cluster holds before the reconcile, and what the plugin says.
#[derive(Debug)]
struct Case {
    deleting: bool,
    existing: Vec<Existing>,
    response: Value,
}

#[derive(Debug)]
struct Existing {
    kind: (&'static str, &'static str),
    namespace: &'static str,
    name: &'static str,
    owner: Owner,
}

#[derive(Debug, Clone, Copy)]
enum Owner {
    None,
    /// Controlled by the primary.
    Primary,
    /// An ownerReference to the primary that is not the controller.
    PrimaryNotController,
    /// Controlled by a sibling primary of the same plugin.
    Sibling,
}

impl Case {
    fn arbitrary(u: &mut Unstructured<'_>) -> ArbResult<Self> {
        let deleting = u.arbitrary()?;
        let mut existing = Vec::new();
        for _ in 0..u.int_in_range(0..=5)? {
            let kind = *u.choose(&KINDS[..5])?;
            existing.push(Existing {
                kind,
                namespace: u.choose(&[NS, NS, OTHER_NS])?,
                name: u.choose(&["a", "b", "c"])?,
                owner: *u.choose(&[
                    Owner::None,
                    Owner::Primary,
                    Owner::PrimaryNotController,
                    Owner::Sibling,
                ])?,
            });
        }
        let response = response(u)?;
        Ok(Self {
            deleting,
            existing,
            response,
        })
    }
}

/// Mostly what a plugin could plausibly return, each part now and then
/// malformed or aimed past the declarations: a response that is wrong
/// everywhere is refused at the first item and tests little.
fn response(u: &mut Unstructured<'_>) -> ArbResult<Value> {
    let mut apply = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        apply.push(object(u)?);
    }
    let mut delete = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let (api_version, kind) = kind(u)?;
        let namespace = if u.ratio(1, 6)? {
            json!(OTHER_NS)
        } else if u.arbitrary()? {
            json!(NS)
        } else {
            Value::Null
        };
        delete.push(json!({"apiVersion": api_version, "kind": kind,
            "namespace": namespace, "name": name(u)?}));
    }
    let (status, status_depth) = match u.int_in_range(0..=9)? {
        0 => (json!([1, 2]), Value::Null),
        // Around serde_json's recursion limit (128), where parsers give up.
        1 => (Value::Null, json!(u.int_in_range(100..=140)?)),
        2 | 3 => (Value::Null, Value::Null),
        _ => (
            json!({"ok": u.arbitrary::<bool>()?, "n": u.int_in_range(0..=3)?}),
            Value::Null,
        ),
    };
    let mut events = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let reason = if u.ratio(1, 8)? {
            *u.choose(&["not camel", ""])?
        } else {
            *u.choose(&["Ok", "Created"])?
        };
        events.push(json!({"warning": u.arbitrary::<bool>()?, "reason": reason,
            "message": u.arbitrary::<String>()?}));
    }
    let requeue = match u.int_in_range(0..=9)? {
        0 => json!(0),
        1 => json!(u64::MAX),
        2 => json!(u.int_in_range(1..=86_400_000u64)?),
        _ => Value::Null,
    };
    Ok(json!({"apply": apply, "delete": delete, "status": status,
        "statusDepth": status_depth, "events": events,
        "requeueAfterMs": requeue, "finalized": u.arbitrary::<bool>()?}))
}

/// Mostly the kinds the plugin declared, now and then another.
fn kind(u: &mut Unstructured<'_>) -> ArbResult<(&'static str, &'static str)> {
    Ok(match u.int_in_range(0..=9)? {
        0..=4 => KINDS[0],
        5 | 6 => KINDS[1],
        _ => *u.choose(KINDS)?,
    })
}

/// Mostly the names the existing objects have, now and then a bad one.
fn name(u: &mut Unstructured<'_>) -> ArbResult<&'static str> {
    Ok(if u.ratio(1, 6)? {
        *u.choose(NAMES)?
    } else {
        *u.choose(&["a", "b", "c"])?
    })
}

/// An apply item: mostly an object of some kind and name, with metadata a
/// plugin should not set, now and then.
fn object(u: &mut Unstructured<'_>) -> ArbResult<Value> {
    if u.ratio(1, 20)? {
        return Ok(u
            .choose(&[json!(7), json!("text"), json!([]), json!(null)])?
            .clone());
    }
    let (api_version, kind) = kind(u)?;
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".into(), json!(name(u)?));
    match u.int_in_range(0..=9)? {
        0 => {
            metadata.insert("namespace".into(), json!(OTHER_NS));
        }
        1 | 2 => {
            metadata.insert("namespace".into(), json!(NS));
        }
        3 if u.ratio(1, 4)? => {
            metadata.insert("namespace".into(), json!(5));
        }
        _ => {}
    }
    for (field, value) in [
        ("ownerReferences", json!(null)),
        (
            "ownerReferences",
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone",
                "uid": "00000000-dead", "controller": true}]),
        ),
        ("finalizers", json!(["evil.example.com/hold"])),
        ("uid", json!("forged-uid")),
        ("resourceVersion", json!("1")),
        ("labels", json!({"k": 5})),
        ("labels", json!({"bad key!": "v"})),
        ("labels", json!({"app": "web"})),
        ("annotations", json!({"note": "x"})),
        ("deletionTimestamp", json!("2020-01-01T00:00:00Z")),
    ] {
        if u.ratio(1, 25)? {
            metadata.insert(field.into(), value);
        }
    }
    Ok(
        json!({"apiVersion": api_version, "kind": kind, "metadata": metadata,
        "data": {"k": u.arbitrary::<String>()?}}),
    )
}

async fn run(plugin: Arc<LoadedPlugin>, case: Case) -> Result<(), Violation> {
    let clock = VirtualClock::at(reconciler_sdk::testing::DEFAULT_NOW_MILLIS);
    let cluster = Arc::new(EmbeddedCluster::new(Arc::new(clock.clone())));
    let user = |object: Value| {
        cluster
            .apply_as_user(object)
            .map_err(|e| Violation(format!("setting up the case: {e}")))
    };
    let hostile = |name: &str, response: &Value| {
        json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
            "metadata": {"name": name, "namespace": NS, "finalizers": [FINALIZER]},
            "spec": {"mode": "scripted", "response": response}})
    };
    let primary = user(hostile(PRIMARY, &case.response))?;
    let sibling = user(hostile(SIBLING, &json!({})))?;
    for e in &case.existing {
        let reference = |owner: &Value, controller: bool| {
            json!([{"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "controller": controller}])
        };
        let refs = match e.owner {
            Owner::None => Value::Null,
            Owner::Primary => reference(&primary, true),
            Owner::PrimaryNotController => reference(&primary, false),
            Owner::Sibling => reference(&sibling, true),
        };
        let mut object = json!({"apiVersion": e.kind.0, "kind": e.kind.1,
            "metadata": {"name": e.name, "namespace": e.namespace}});
        if !refs.is_null() {
            object["metadata"]["ownerReferences"] = refs;
        }
        // Two entries may name one object; the last wins, as for a user.
        user(object)?;
    }
    if case.deleting {
        let key = ObjectKey::of(&primary).ok_or_else(|| Violation("primary key".into()))?;
        cluster
            .delete_as_user(&key)
            .map_err(|e| Violation(format!("deleting the primary: {e}")))?;
    }

    let engine = Engine::new(cluster.clone(), Arc::new(clock.clone()), vec![plugin])
        .await
        .map_err(|e| Violation(format!("engine: {e}")))?;
    engine.pump();
    let before = snapshot(&cluster);
    let record = engine
        .reconcile(
            "hostile",
            PrimaryKey {
                namespace: Some(NS.to_string()),
                name: PRIMARY.to_string(),
            },
        )
        .await;
    let after = snapshot(&cluster);

    let describe = || format!("case {case:?}\noutcome: {record}");
    if let Outcome::Failed { message, .. } = &record.outcome
        && !message.contains("partial apply")
        && before != after
    {
        return Err(Violation(format!(
            "a refused response changed the cluster: {}\n{}",
            diff(&before, &after),
            describe()
        )));
    }
    let primary_uid = primary["metadata"]["uid"].as_str().unwrap_or_default();
    for key in before.keys().chain(after.keys()) {
        let (was, is) = (before.get(key), after.get(key));
        if was == is {
            continue;
        }
        if let Err(why) = allowed_change(key, was, is, primary_uid) {
            return Err(Violation(format!("{key}: {why}\n{}", describe())));
        }
    }
    Ok(())
}

/// Every object by key, without the fields every write bumps.
fn snapshot(cluster: &EmbeddedCluster) -> BTreeMap<ObjectKey, Value> {
    cluster
        .objects()
        .into_iter()
        .filter_map(|mut o| {
            let key = ObjectKey::of(&o)?;
            if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
                meta.remove("managedFields");
            }
            Some((key, o))
        })
        .collect()
}

fn diff(before: &BTreeMap<ObjectKey, Value>, after: &BTreeMap<ObjectKey, Value>) -> String {
    let mut lines = Vec::new();
    for key in before.keys().chain(after.keys()) {
        if before.get(key) != after.get(key) {
            lines.push(format!(
                "{key}: {:?} -> {:?}",
                before.get(key),
                after.get(key)
            ));
        }
    }
    lines.dedup();
    lines.join("\n")
}

fn controlled_by(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["controller"] == json!(true) && r["uid"] == json!(uid))
        })
}

/// Invariant 2 for one object that changed from `was` to `is`.
fn allowed_change(
    key: &ObjectKey,
    was: Option<&Value>,
    is: Option<&Value>,
    primary_uid: &str,
) -> Result<(), String> {
    if key.namespace.as_deref() != Some(NS) {
        return Err("changed outside the primary's namespace".into());
    }
    match (key.kind.api_version().as_str(), key.kind.kind.as_str()) {
        ("hostile.example.com/v1", "Hostile") if key.name == PRIMARY => {
            let (Some(was), Some(is)) = (was, is) else {
                // Released by its finalizer: the primary may go.
                return if is.is_none() {
                    Ok(())
                } else {
                    Err("the primary appeared".into())
                };
            };
            let strip = |o: &Value| {
                let mut o = o.clone();
                if let Some(map) = o.as_object_mut() {
                    map.remove("status");
                }
                if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("finalizers");
                    meta.remove("generation");
                }
                o
            };
            if strip(was) == strip(is) {
                Ok(())
            } else {
                Err("the primary changed beyond its status and finalizers".into())
            }
        }
        ("v1", "ConfigMap") => match was {
            Some(was) if !controlled_by(was, primary_uid) => {
                Err("an owned-kind object the primary did not control was changed".into())
            }
            _ => match is {
                Some(is) if !controlled_by(is, primary_uid) => {
                    Err("an owned object was left without the primary as controller".into())
                }
                _ => Ok(()),
            },
        },
        ("v1", "ServiceAccount") => match is {
            None => Err("an object of a written kind went away".into()),
            Some(_) => Ok(()),
        },
        _ => Err("an object of a kind the plugin does not own or write changed".into()),
    }
}
