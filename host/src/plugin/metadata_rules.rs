//! Validation of a plugin's metadata at load. Each rule names the field it
//! refused, so the author knows exactly what to change.

use std::collections::HashMap;

use reconciler_contract::triggers::path_problem;
use reconciler_contract::{Change, KindRef, MapRule, PluginMetadata};

use super::names::{check_dns_label, check_dns_subdomain, check_kind, check_qualified_name};

/// A metadata field that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata field `{field}`: {reason}")]
pub struct MetadataError {
    pub field: String,
    pub reason: String,
}

fn at(field: impl Into<String>) -> impl FnOnce(String) -> MetadataError {
    let field = field.into();
    move |reason| MetadataError { field, reason }
}

fn check_kind_ref(field: &str, k: &KindRef) -> Result<(), MetadataError> {
    if !k.group.is_empty() {
        check_dns_subdomain(&k.group).map_err(at(format!("{field}.group")))?;
    }
    check_dns_label(&k.version).map_err(at(format!("{field}.version")))?;
    check_kind(&k.kind).map_err(at(format!("{field}.kind")))
}

/// Checks every rule; returns the first broken one.
pub fn validate_metadata(m: &PluginMetadata) -> Result<(), MetadataError> {
    check_dns_label(&m.name).map_err(at("name"))?;
    if m.version.trim().is_empty()
        || m.version.len() > 64
        || m.version.chars().any(char::is_whitespace)
    {
        return Err(at("version")(format!(
            "{:?} must be 1 to 64 characters without spaces",
            m.version
        )));
    }

    // Every declared kind with the field that declares it, in field order.
    let mut roles: Vec<(String, &KindRef)> = vec![("primary".into(), &m.primary)];
    roles.extend(
        m.owns
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("owns[{i}]"), k)),
    );
    roles.extend(
        m.reads
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("reads[{i}]"), &r.kind)),
    );
    roles.extend(
        m.writes
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("writes[{i}]"), k)),
    );
    for (field, kind) in &roles {
        check_kind_ref(field, kind)?;
    }
    for (i, r) in m.reads.iter().enumerate() {
        match &r.maps_by {
            MapRule::Label(key) => {
                check_qualified_name(key).map_err(at(format!("reads[{i}].mapsBy.label")))?
            }
            MapRule::Annotation(key) => {
                check_qualified_name(key).map_err(at(format!("reads[{i}].mapsBy.annotation")))?
            }
            MapRule::SameName | MapRule::None => {}
        }
    }
    let mut seen: HashMap<&KindRef, String> = HashMap::new();
    for (field, kind) in roles {
        if let Some(first) = seen.get(kind) {
            return Err(at(field.clone())(format!(
                "{kind} is already declared as `{first}`; declare each kind once, in one role"
            )));
        }
        seen.insert(kind, field);
    }

    check_triggers(m)?;

    if let Some(finalizer) = &m.finalizer {
        check_qualified_name(finalizer).map_err(at("finalizer"))?;
        if !finalizer.contains('/') {
            return Err(at("finalizer")(format!(
                "{finalizer:?} must be qualified with a domain, like example.com/{finalizer}"
            )));
        }
    }
    if m.hints.max_concurrent_reconciles == Some(0) {
        return Err(at("hints.maxConcurrentReconciles")(
            "must be at least 1".into(),
        ));
    }
    for (field, value) in [
        ("hints.memoryLimitMib", m.hints.memory_limit_mib),
        ("hints.timeoutMs", m.hints.timeout_ms),
        ("hints.maxOutputKib", m.hints.max_output_kib),
    ] {
        if value == Some(0) {
            return Err(at(field)(
                "must be more than 0 (leave it unset for the host's default)".into(),
            ));
        }
    }
    Ok(())
}

/// Bounds on one `fields` change. The host, not the sandbox, compares the
/// paths on every watch event of the kind, so a plugin must not be able to
/// make that comparison cost what it likes.
const MAX_FIELD_PATHS: usize = 32;
const MAX_PATH_LEN: usize = 256;

/// The `triggers` export's rules: each kind named once, with at least one
/// change, and one whose changes wake a primary at all.
fn check_triggers(m: &PluginMetadata) -> Result<(), MetadataError> {
    let mut named: HashMap<&KindRef, usize> = HashMap::new();
    for (i, trigger) in m.triggers.iter().enumerate() {
        let field = format!("triggers[{i}]");
        let kind = &trigger.kind;
        if let Some(first) = named.insert(kind, i) {
            return Err(at(field)(format!(
                "{kind} is already named by `triggers[{first}]`; name each kind once, with all its changes"
            )));
        }
        if trigger.wake_on.is_empty() {
            return Err(at(format!("{field}.wakeOn"))(format!(
                "{kind} names no change; to be woken by none, map the read kind by `none`"
            )));
        }
        let metadata_only = match m.reads.iter().find(|r| &r.kind == kind) {
            Some(read) if read.maps_by == MapRule::None => {
                return Err(at(field)(format!(
                    "{kind} is read with mapsBy `none`: its changes wake no primary, so there is nothing to filter"
                )));
            }
            Some(read) => read.metadata_only,
            None if kind == &m.primary || m.owns_kind(kind) => false,
            None if m.writes.contains(kind) => {
                return Err(at(field)(format!(
                    "{kind} is declared in `writes`, and written kinds never wake a primary; declare it in `reads` with a map rule to be woken by it"
                )));
            }
            None => {
                return Err(at(field)(format!(
                    "{kind} is not the primary, an owned kind or a read kind of this plugin"
                )));
            }
        };
        for (j, change) in trigger.wake_on.iter().enumerate() {
            let Change::Fields(paths) = change else {
                continue;
            };
            let field = format!("{field}.wakeOn[{j}].fields");
            if paths.is_empty() {
                return Err(at(field)("names no field path".into()));
            }
            if paths.len() > MAX_FIELD_PATHS || paths.iter().any(|p| p.len() > MAX_PATH_LEN) {
                return Err(at(field)(format!(
                    "at most {MAX_FIELD_PATHS} paths of at most {MAX_PATH_LEN} characters: the host compares them on every change of {kind}"
                )));
            }
            for path in paths {
                if let Some(problem) = path_problem(path) {
                    return Err(at(field)(problem));
                }
                if metadata_only && path != "metadata" && !path.starts_with("metadata.") {
                    return Err(at(field)(format!(
                        "{path:?} is outside `metadata`, and {kind} is read metadata-only: the host never holds that field"
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use reconciler_contract::Hints;

    use super::*;

    fn valid() -> PluginMetadata {
        PluginMetadata::new(
            "podset",
            "0.1.0",
            KindRef::new("example.com", "v1alpha1", "PodSet"),
        )
        .owns(KindRef::new("apps", "v1", "Deployment"))
        .reads(
            KindRef::new("", "v1", "Pod"),
            MapRule::Label("podset".into()),
            true,
        )
        .finalizer("example.com/cleanup")
    }

    #[test]
    fn well_formed_metadata_passes() {
        validate_metadata(&valid()).unwrap();
    }

    #[test]
    fn each_broken_rule_names_its_field() {
        type Break = fn(&mut PluginMetadata);
        let cases: &[(&str, Break)] = &[
            ("name", |m| m.name = "Pod_Set".into()),
            ("version", |m| m.version = "".into()),
            ("primary.group", |m| m.primary.group = "Example.com".into()),
            ("primary.version", |m| m.primary.version = "".into()),
            ("owns[0].kind", |m| m.owns[0].kind = "deployment".into()),
            ("reads[0].mapsBy.label", |m| {
                m.reads[0].maps_by = MapRule::Label("bad key!".into())
            }),
            ("writes[0]", |m| {
                m.writes.push(KindRef::new("apps", "v1", "Deployment"))
            }),
            ("owns[1]", |m| {
                m.owns
                    .push(KindRef::new("example.com", "v1alpha1", "PodSet"))
            }),
            ("finalizer", |m| m.finalizer = Some("cleanup".into())),
            ("hints.maxConcurrentReconciles", |m| {
                m.hints = Hints {
                    max_concurrent_reconciles: Some(0),
                    ..Default::default()
                }
            }),
            ("hints.timeoutMs", |m| {
                m.hints = Hints {
                    timeout_ms: Some(0),
                    ..Default::default()
                }
            }),
        ];
        for (field, breaks) in cases {
            let mut m = valid();
            breaks(&mut m);
            let err = validate_metadata(&m).expect_err(field);
            assert_eq!(err.field, *field, "{err}");
        }
    }

    #[test]
    fn each_broken_trigger_rule_names_its_place() {
        let deployment = KindRef::new("apps", "v1", "Deployment");
        let pod = KindRef::new("", "v1", "Pod");
        let fields = |p: &str| Change::Fields(vec![p.into()]);
        let cases: Vec<(&str, &str, PluginMetadata)> = vec![
            (
                "triggers[1]",
                "already named",
                valid()
                    .wake_on(deployment.clone(), [Change::Generation])
                    .wake_on(deployment.clone(), [Change::Labels]),
            ),
            (
                "triggers[0].wakeOn",
                "names no change",
                valid().wake_on(deployment.clone(), []),
            ),
            (
                "triggers[0]",
                "written kinds never wake",
                valid()
                    .writes(KindRef::new("", "v1", "ConfigMap"))
                    .wake_on(KindRef::new("", "v1", "ConfigMap"), [Change::Any]),
            ),
            (
                "triggers[0]",
                "mapsBy `none`",
                valid()
                    .reads(KindRef::new("", "v1", "Secret"), MapRule::None, false)
                    .wake_on(KindRef::new("", "v1", "Secret"), [Change::Any]),
            ),
            (
                "triggers[0]",
                "not the primary",
                valid().wake_on(KindRef::new("", "v1", "Service"), [Change::Any]),
            ),
            (
                "triggers[0].wakeOn[1].fields",
                "empty key",
                valid().wake_on(deployment.clone(), [Change::Generation, fields("spec..x")]),
            ),
            (
                "triggers[0].wakeOn[0].fields",
                "at most 32 paths",
                valid().wake_on(
                    deployment.clone(),
                    [Change::Fields(
                        (0..33).map(|i| format!("spec.f{i}")).collect(),
                    )],
                ),
            ),
            (
                "triggers[0].wakeOn[0].fields",
                "read metadata-only",
                valid().wake_on(pod.clone(), [fields("status.phase")]),
            ),
        ];
        for (field, says, m) in cases {
            let err = validate_metadata(&m).expect_err(field);
            assert_eq!(err.field, field, "{err}");
            assert!(err.reason.contains(says), "{err}");
        }
    }

    #[test]
    fn triggers_on_the_primary_owned_and_mapped_read_kinds_pass() {
        let m = valid()
            .wake_on(
                KindRef::new("example.com", "v1alpha1", "PodSet"),
                [Change::Generation],
            )
            .wake_on(
                KindRef::new("apps", "v1", "Deployment"),
                [
                    Change::Generation,
                    Change::Fields(vec!["status.readyReplicas".into()]),
                ],
            )
            .wake_on(
                KindRef::new("", "v1", "Pod"),
                [
                    Change::Labels,
                    Change::Fields(vec!["metadata.deletionTimestamp".into()]),
                ],
            );
        validate_metadata(&m).unwrap();
    }

    #[test]
    fn a_kind_declared_twice_names_both_places() {
        let m = valid().writes(KindRef::new("apps", "v1", "Deployment"));
        let err = validate_metadata(&m).unwrap_err().to_string();
        assert!(
            err.contains("`writes[0]`") && err.contains("`owns[0]`"),
            "{err}"
        );
    }
}
