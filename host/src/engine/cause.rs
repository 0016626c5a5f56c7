//! Why a primary was queued for a reconcile: kept by its queue from the
//! moment it is queued until the reconcile that takes it, which tells it
//! in its span (and its log line) as `trigger`.

use std::fmt;

use super::field_diff::FieldChange;
use crate::cluster::WatchEventType;

/// One reason a primary was queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A watch event of the primary itself, or of a child or read object
    /// that maps to it.
    Event {
        kind: String,
        /// `namespace/name`, or `name` when cluster-scoped.
        object: String,
        change: WatchEventType,
        /// For a change, the fields that changed and who manages them
        /// (when the journal is on).
        fields: Option<Box<ChangedFields>>,
    },
    /// The plugin asked to be called again after a while (or the host did,
    /// for a status write that met a newer version of the primary).
    Requeue,
    /// The reconcile before failed, and its backoff ran out.
    Retry,
    /// The plugin was loaded, or a new version of it: every primary is
    /// reconciled.
    PluginLoaded,
    /// A candidate version of the plugin came (a shadow or canary
    /// rollout): every primary is reconciled, so it sees them all.
    Candidate,
    /// This replica was given the object by the shard ring.
    RingMove,
}

/// The fields a watch event changed, and the field managers that manage
/// them in the new object (`name (Operation)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedFields {
    pub fields: Vec<FieldChange>,
    pub more: usize,
    pub by: Vec<String>,
}

impl fmt::Display for ChangedFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, field) in self.fields.iter().enumerate() {
            f.write_str(if i == 0 { " " } else { ", " })?;
            write!(f, "{field}")?;
        }
        if self.more > 0 {
            write!(f, " (and {} more field(s))", self.more)?;
        }
        if !self.by.is_empty() {
            write!(f, " [managed by {}]", self.by.join(", "))?;
        }
        Ok(())
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Event {
                kind,
                object,
                change,
                fields,
            } => {
                let change = match change {
                    WatchEventType::Added => "added",
                    WatchEventType::Modified => "changed",
                    WatchEventType::Deleted => "deleted",
                };
                write!(f, "{kind} {object} {change}")?;
                match fields {
                    Some(fields) => write!(f, "{fields}"),
                    None => Ok(()),
                }
            }
            Cause::Requeue => f.write_str("requeue"),
            Cause::Retry => f.write_str("retry after a failure"),
            Cause::PluginLoaded => f.write_str("plugin loaded"),
            Cause::Candidate => f.write_str("a candidate version came (shadow or canary rollout)"),
            Cause::RingMove => f.write_str("shard moved here"),
        }
    }
}

/// The most distinct causes kept for one reconcile; past it they are
/// counted.
pub const MAX_CAUSES: usize = 4;

/// The causes of one reconcile: distinct ones, in the order they came, and
/// how many more there were.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Causes {
    pub first: Vec<Cause>,
    pub more: usize,
}

impl Causes {
    /// Adds `cause` unless it is there already.
    pub fn add(&mut self, cause: Cause) {
        if self.first.contains(&cause) {
            return;
        }
        if self.first.len() < MAX_CAUSES {
            self.first.push(cause);
        } else {
            self.more += 1;
        }
    }

    /// Adds every cause of `other`.
    pub fn extend(&mut self, other: Causes) {
        for cause in other.first {
            self.add(cause);
        }
        self.more += other.more;
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }
}

impl fmt::Display for Causes {
    /// `PodSet default/web changed; Deployment default/web changed (and 3 more)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first.is_empty() {
            return f.write_str("unknown");
        }
        for (i, cause) in self.first.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{cause}")?;
        }
        if self.more > 0 {
            write!(f, " (and {} more)", self.more)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(object: &str) -> Cause {
        Cause::Event {
            kind: "Pod".into(),
            object: object.into(),
            change: WatchEventType::Modified,
            fields: None,
        }
    }

    #[test]
    fn a_change_tells_its_fields_and_who_manages_them() {
        let field = |path: &str, old: Option<&str>, new: Option<&str>| FieldChange {
            path: path.into(),
            old: old.map(str::to_string),
            new: new.map(str::to_string),
        };
        let cause = Cause::Event {
            kind: "Deployment".into(),
            object: "d/web".into(),
            change: WatchEventType::Modified,
            fields: Some(Box::new(ChangedFields {
                fields: vec![
                    field(".status.readyReplicas", Some("2"), Some("3")),
                    field(".metadata.labels.a", None, Some("\"x\"")),
                ],
                more: 2,
                by: vec!["kube-controller-manager (Update)".into()],
            })),
        };
        assert_eq!(
            cause.to_string(),
            "Deployment d/web changed .status.readyReplicas 2 -> 3, .metadata.labels.a (none) -> \"x\" (and 2 more field(s)) [managed by kube-controller-manager (Update)]"
        );
    }

    #[test]
    fn causes_are_kept_once_each_and_counted_past_the_first_few() {
        let mut causes = Causes::default();
        assert_eq!(causes.to_string(), "unknown");
        causes.add(changed("d/a"));
        causes.add(changed("d/a"));
        causes.add(Cause::Requeue);
        assert_eq!(causes.to_string(), "Pod d/a changed; requeue");
        for name in ["d/b", "d/c", "d/d", "d/e"] {
            causes.add(changed(name));
        }
        assert_eq!(causes.first.len(), MAX_CAUSES);
        assert_eq!(
            causes.to_string(),
            "Pod d/a changed; requeue; Pod d/b changed; Pod d/c changed (and 2 more)"
        );
    }
}
