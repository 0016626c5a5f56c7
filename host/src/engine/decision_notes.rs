//! What one reconcile read and what the API server did with each of its
//! writes, noted as it runs: the journal tells it (`explain`), and loop
//! detection compares one reconcile's writes with the last ones'.

use std::fmt;

use serde_json::Value;

use super::field_diff::{self, FieldChange};
use crate::cluster::ObjectKey;
pub use crate::golden::recorder::ReadMade;

/// What the API server did with one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteResult {
    /// Made the object.
    Created,
    /// Stored a new version; these fields changed.
    Changed {
        fields: Vec<FieldChange>,
        more: usize,
    },
    /// Stored nothing new. `not_as_sent`: fields it holds otherwise than
    /// sent (it normalized or dropped them), which the host will find
    /// different, and send, again.
    Unchanged {
        not_as_sent: Vec<FieldChange>,
        more: usize,
    },
    /// Done, nothing to compare (a delete).
    Done,
    /// Refused, with the API server's reason.
    Refused(String),
}

/// One write of a reconcile and its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// `apply`, `apply status`, `delete`.
    pub verb: &'static str,
    pub object: ObjectKey,
    pub result: WriteResult,
}

impl Written {
    /// The result of applying `sent` to `object`, held as `before` (absent:
    /// a create) and stored as `stored`.
    pub fn applied(
        verb: &'static str,
        object: ObjectKey,
        before: Option<&Value>,
        sent: &Value,
        stored: &Value,
    ) -> Self {
        let result = result_of(
            &object,
            before,
            stored,
            || field_diff::not_as_sent(sent, stored),
            |before| field_diff::diff(before, stored),
        );
        Self {
            verb,
            object,
            result,
        }
    }

    /// A write that made `object`.
    pub fn created(verb: &'static str, object: ObjectKey) -> Self {
        Self {
            verb,
            object,
            result: WriteResult::Created,
        }
    }

    /// The result of writing the status `sent` of the primary `object`,
    /// held as `before` and stored as `stored`: [`Written::applied`] of
    /// their `.status` alone, compared in place.
    pub fn status_applied(object: ObjectKey, before: &Value, sent: &Value, stored: &Value) -> Self {
        let stored_status = stored.get("status");
        let result = result_of(
            &object,
            Some(before),
            stored,
            || field_diff::not_as_sent_at(".status", sent, stored_status),
            |before| field_diff::diff_at(".status", before.get("status"), stored_status),
        );
        Self {
            verb: "apply status",
            object,
            result,
        }
    }

    /// Whether the API server stored nothing new and holds some field
    /// otherwise than sent: the host finds it different and sends it again
    /// at every reconcile.
    pub fn sent_again_for_nothing(&self) -> bool {
        matches!(&self.result, WriteResult::Unchanged { not_as_sent, .. } if !not_as_sent.is_empty())
    }
}

type Fields = (Vec<FieldChange>, usize);

/// What the API server did with a write of `object`, held as `before`
/// (absent: a create) and stored as `stored`: unchanged when it kept the
/// version, and then `not_as_sent` tells what it holds otherwise than
/// sent; else `changed` compares `before` with what it stored.
fn result_of(
    object: &ObjectKey,
    before: Option<&Value>,
    stored: &Value,
    not_as_sent: impl FnOnce() -> Fields,
    changed: impl FnOnce(&Value) -> Fields,
) -> WriteResult {
    fn version(o: &Value) -> Option<&Value> {
        o.pointer("/metadata/resourceVersion")
    }
    let kind = object.kind.kind.as_str();
    let Some(before) = before else {
        return WriteResult::Created;
    };
    if version(before).is_some() && version(before) == version(stored) {
        let (not_as_sent, more) = not_as_sent();
        let not_as_sent = field_diff::redacted(kind, not_as_sent);
        return WriteResult::Unchanged { not_as_sent, more };
    }
    let (fields, more) = changed(before);
    WriteResult::Changed {
        fields: field_diff::redacted(kind, fields),
        more,
    }
}

fn fields_text(f: &mut fmt::Formatter<'_>, fields: &[FieldChange], more: usize) -> fmt::Result {
    for (i, field) in fields.iter().enumerate() {
        f.write_str(if i == 0 { " " } else { ", " })?;
        write!(f, "{field}")?;
    }
    if more > 0 {
        write!(f, " (and {more} more field(s))")?;
    }
    Ok(())
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: ", self.verb, self.object)?;
        match &self.result {
            WriteResult::Created => f.write_str("created"),
            WriteResult::Changed { fields, more } if fields.is_empty() && *more == 0 => {
                f.write_str("changed (bookkeeping only)")
            }
            WriteResult::Changed { fields, more } => {
                f.write_str("changed")?;
                fields_text(f, fields, *more)
            }
            WriteResult::Unchanged { not_as_sent, .. } if not_as_sent.is_empty() => {
                f.write_str("no change")
            }
            WriteResult::Unchanged { not_as_sent, more } => {
                f.write_str("no change; the API server holds, as sent -> as stored,")?;
                fields_text(f, not_as_sent, *more)
            }
            WriteResult::Done => f.write_str("done"),
            WriteResult::Refused(reason) => write!(f, "refused: {reason}"),
        }
    }
}

/// What a reconcile noted for the journal and loop detection.
#[derive(Debug, Default)]
pub struct Notes {
    pub reads: Vec<ReadMade>,
    pub writes: Vec<Written>,
    /// The reconcile's inputs and answer, when the journal keeps them:
    /// `explain --as-case`.
    pub case: Option<super::case_inputs::CaseInputs>,
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;
    use serde_json::json;

    use super::*;

    fn key() -> ObjectKey {
        ObjectKey::new(KindRef::new("apps", "v1", "Deployment"), Some("d"), "web")
    }

    #[test]
    fn a_write_says_what_the_api_server_made_of_it() {
        let before = json!({"metadata": {"resourceVersion": "5"}, "spec": {"replicas": 5}});
        let sent = json!({"spec": {"replicas": 3}});
        let stored = json!({"metadata": {"resourceVersion": "6"}, "spec": {"replicas": 3}});
        let changed = Written::applied("apply", key(), Some(&before), &sent, &stored);
        assert_eq!(
            changed.to_string(),
            "apply Deployment d/web: changed .spec.replicas 5 -> 3"
        );
        let created = Written::applied("apply", key(), None, &sent, &stored);
        assert_eq!(created.to_string(), "apply Deployment d/web: created");
        let same = json!({"metadata": {"resourceVersion": "6"}, "spec": {"replicas": 3}});
        let unchanged = Written::applied("apply", key(), Some(&same), &sent, &stored);
        assert_eq!(unchanged.to_string(), "apply Deployment d/web: no change");
        assert!(!unchanged.sent_again_for_nothing());
        let normalized = json!({"metadata": {"resourceVersion": "6"}, "spec": {"cpu": "1"}});
        let sent = json!({"spec": {"cpu": "1000m"}});
        let for_nothing = Written::applied("apply", key(), Some(&normalized), &sent, &normalized);
        assert_eq!(
            for_nothing.to_string(),
            "apply Deployment d/web: no change; the API server holds, as sent -> as stored, .spec.cpu \"1000m\" -> \"1\""
        );
        assert!(for_nothing.sent_again_for_nothing());
    }
}
