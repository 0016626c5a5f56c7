//! Running golden cases against a compiled plugin.

use reconciler_contract::object_meta::MetadataField;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use reconciler_contract::memory_cache::MemoryCache;
use reconciler_contract::{ClusterInfo, DEFAULT_NOW_MILLIS};
use serde_json::Value;

use super::admission_case::check_admission;
use super::case::{Case, Expectation};
use super::change_case::check_change;
use super::outcome::{CaseOutcome, CaseResult, diff_yaml, to_yaml};
use crate::plugin::{LoadedPlugin, ReconcileInput, ValidResponse};
use crate::support::duration_text::format_duration;

/// Case files in `path` (`*.yaml`, `*.yml`, sorted), or `path` itself if it
/// is a file.
pub fn discover(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use anyhow::Context as _;
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("cannot read the cases directory {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        anyhow::bail!("no case files (*.yaml) in {}", path.display());
    }
    Ok(files)
}

/// Runs one case file.
pub fn run_case(plugin: &LoadedPlugin, file: &Path) -> CaseResult {
    let started = Instant::now();
    let (description, outcome) = match load_case(file) {
        Err(reason) => (None, CaseOutcome::Broken(reason)),
        Ok(case) => (case.description.clone(), check(plugin, case)),
    };
    CaseResult {
        file: file.to_path_buf(),
        description,
        elapsed: started.elapsed(),
        outcome,
    }
}

pub(crate) fn load_case(file: &Path) -> Result<Case, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read: {e}"))?;
    serde_yaml_ng::from_str(&text).map_err(|e| format!("not a valid case: {e}"))
}

/// The case's `now`, or the default virtual time.
pub(crate) fn case_now(case: &Case) -> Result<i64, String> {
    match case.now.as_deref().map(str::parse::<Timestamp>) {
        None => Ok(DEFAULT_NOW_MILLIS),
        Some(Ok(t)) => Ok(t.as_millisecond()),
        Some(Err(e)) => Err(format!("`now` is not an RFC 3339 time: {e}")),
    }
}

fn check(plugin: &LoadedPlugin, case: Case) -> CaseOutcome {
    let now_millis = match case_now(&case) {
        Ok(now) => now,
        Err(why) => return CaseOutcome::Broken(why),
    };
    if case.cluster.as_ref().is_some_and(|c| c.name.is_empty()) {
        return CaseOutcome::Broken(
            "`cluster.name` is empty: name the cluster, or leave `cluster` out for `local`"
                .to_string(),
        );
    }
    if let Some(outcome) = change_case(plugin, &case) {
        return outcome;
    }
    let primary = match (case.primary.clone(), &case.admission) {
        (Some(primary), None) => primary,
        (None, Some(admission)) => {
            if !case.objects.is_empty() {
                return CaseOutcome::Broken(
                    "an admission case has no `objects`: admission cannot read the cache"
                        .to_string(),
                );
            }
            return check_admission(plugin, admission, case.expect, now_millis);
        }
        (Some(_), Some(_)) => {
            return CaseOutcome::Broken(
                "a case has `primary` (reconcile) or `admission`, not both".to_string(),
            );
        }
        (None, None) => {
            return CaseOutcome::Broken(
                "a case needs `primary` (a reconcile case), `admission` (an admission case) or `change` (a change case)"
                    .to_string(),
            );
        }
    };
    let expect: Expectation = match serde_json::from_value(case.expect.clone()) {
        Ok(e) => e,
        Err(e) => return CaseOutcome::Broken(format!("not a valid case: expect: {e}")),
    };
    let input = match reconcile_input(plugin, &case, primary, now_millis) {
        Ok(input) => input,
        Err(why) => return CaseOutcome::Broken(why),
    };
    let primary_namespace = input.primary_namespace.clone();
    let result = plugin.reconcile(input);

    match (&expect.error, result) {
        (Some(needle), Err(e)) if e.to_string().contains(needle.as_str()) => CaseOutcome::Passed,
        (Some(needle), Err(e)) => {
            CaseOutcome::Failed(format!("expected an error containing {needle:?}, got: {e}"))
        }
        (Some(needle), Ok(r)) => CaseOutcome::Failed(format!(
            "expected an error containing {needle:?}, but the plugin answered:\n{}",
            to_yaml(&expectation_of(r))
        )),
        (None, Err(e)) => CaseOutcome::Failed(format!("reconcile failed: {e}")),
        (None, Ok(r)) => {
            let expected = normalise(expect, primary_namespace.as_deref());
            let actual = expectation_of(r);
            if expected == actual {
                CaseOutcome::Passed
            } else {
                CaseOutcome::Failed(diff(&expected, &actual))
            }
        }
    }
}

/// What a reconcile case hands `plugin`: its primary among its objects,
/// at its `now`, in its cluster.
pub(crate) fn reconcile_input(
    plugin: &LoadedPlugin,
    case: &Case,
    primary: Value,
    now_millis: i64,
) -> Result<ReconcileInput, String> {
    let mut cache = MemoryCache::new();
    for object in case.objects.iter().chain([&primary]) {
        cache.insert(object.clone()).map_err(|e| e.to_string())?;
    }
    let primary_namespace = primary
        .metadata_field("namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    let request = cache.request_for(&primary, &plugin.metadata().owns);
    let object = format!(
        "{}/{}",
        primary_namespace.as_deref().unwrap_or(""),
        primary
            .metadata_field("name")
            .and_then(Value::as_str)
            .unwrap_or("")
    );
    Ok(ReconcileInput {
        request,
        primary_namespace,
        object,
        reader: Arc::new(cache),
        now_millis,
        // As the host names them: the name is among the labels.
        cluster: Arc::new(match &case.cluster {
            Some(c) => ClusterInfo::with_labels(&c.name, c.labels.clone()),
            None => ClusterInfo::local(),
        }),
    })
}

/// The outcome of a change case; `None` for a case of another shape.
fn change_case(plugin: &LoadedPlugin, case: &Case) -> Option<CaseOutcome> {
    let change = case.change.as_ref()?;
    Some(
        if case.primary.is_some() || case.admission.is_some() || !case.objects.is_empty() {
            CaseOutcome::Broken(
                "a change case has `change` and `expect` only: no `primary`, `admission` or `objects`"
                    .to_string(),
            )
        } else {
            check_change(plugin, change, case.expect.clone())
        },
    )
}

/// A response in the expectation's shape: what a case compares, and what
/// a recorded case expects.
pub(crate) fn expectation_of(r: ValidResponse) -> Expectation {
    let mut e = Expectation {
        apply: r.apply.into_iter().map(|d| d.object).collect(),
        delete: r.delete,
        status: r.status.map(Value::Object),
        events: r.events,
        requeue_after: r.requeue_after.map(format_duration),
        finalized: r.finalized,
        error: None,
    };
    sort(&mut e);
    e
}

/// Applies the host's defaults to what a case expects, so a case may leave
/// out what the host fills in (the primary's namespace) and list objects in
/// any order.
fn normalise(mut e: Expectation, primary_namespace: Option<&str>) -> Expectation {
    if let Some(ns) = primary_namespace {
        for object in &mut e.apply {
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.entry("namespace")
                    .or_insert_with(|| Value::String(ns.to_string()));
            }
        }
        for d in &mut e.delete {
            d.namespace.get_or_insert_with(|| ns.to_string());
        }
    }
    // Accept `90s` as well as `1m30s`: compare canonical forms.
    if let Some(d) = e
        .requeue_after
        .as_deref()
        .and_then(|t| crate::support::duration_text::parse_duration(t).ok())
    {
        e.requeue_after = Some(format_duration(d));
    }
    sort(&mut e);
    e
}

fn sort(e: &mut Expectation) {
    let key = |v: &Value| {
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        (
            s("/apiVersion"),
            s("/kind"),
            s("/metadata/namespace"),
            s("/metadata/name"),
        )
    };
    e.apply.sort_by_key(key);
    e.delete.sort();
}

fn diff(expected: &Expectation, actual: &Expectation) -> String {
    diff_yaml(expected, actual)
}
