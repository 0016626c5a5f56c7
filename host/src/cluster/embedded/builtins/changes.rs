//! What the built-in controllers did, as `dev` and `simulate` show it.
//!
//! Why a module: every controller records its changes through a round, and
//! the front ends group them into lines; both sides meet on these.

/// One change a built-in controller made, for `dev` and `simulate` to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltinChange {
    pub at_millis: i64,
    /// `created`, `started`, `deleted`, `scaled`, `completed`, `failed`...
    pub verb: &'static str,
    pub kind: String,
    /// `namespace/name`.
    pub object: String,
    /// Said after the object (` to 3 replicas`), or empty.
    pub detail: String,
}

impl std::fmt::Display for BuiltinChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}{}",
            self.verb, self.kind, self.object, self.detail
        )
    }
}

/// Changes as few lines: a run of the same verb on the same kind is one
/// line naming every object (`created Pod default/a, default/b`).
pub fn group_changes(changes: &[BuiltinChange]) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut previous: Option<&BuiltinChange> = None;
    for change in changes {
        match (previous, lines.last_mut()) {
            (Some(p), Some(line))
                if p.verb == change.verb && p.kind == change.kind && p.detail == change.detail =>
            {
                line.truncate(line.len() - p.detail.len());
                line.push_str(&format!(", {}{}", change.object, change.detail));
            }
            _ => lines.push(change.to_string()),
        }
        previous = Some(change);
    }
    lines
}
