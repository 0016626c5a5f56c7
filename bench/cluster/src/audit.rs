//! The controller's API writes, counted from the API server's audit log.
//!
//! The bench's audit policy logs only the controller's own user at Metadata
//! level without the RequestReceived stage, so each request is one
//! ResponseStarted (long-running requests such as watches only) and one
//! ResponseComplete line. A write is a ResponseComplete of a mutating verb;
//! refused writes (a conflict, say) count too: the API server did the work.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// Writes by what they wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Writes {
    pub deployments: u64,
    pub podset_status: u64,
    /// PodSets themselves, not their status: the host's shard labels.
    pub podsets: u64,
    pub events: u64,
    pub other: u64,
    /// Of all the above, those the API server answered with an error.
    pub refused: u64,
    /// Writes in the namespace set aside (the driver's probes), counted
    /// here alone.
    pub aside: u64,
}

impl Writes {
    pub fn total(&self) -> u64 {
        self.deployments + self.podset_status + self.podsets + self.events + self.other + self.aside
    }

    /// Writes of objects (Deployments, PodSets, their status, Events)
    /// outside the namespace set aside: what a move must not cause.
    pub fn objects(&self) -> u64 {
        self.deployments + self.podset_status + self.podsets + self.events
    }

    pub fn add(&mut self, other: &Writes) {
        self.deployments += other.deployments;
        self.podset_status += other.podset_status;
        self.podsets += other.podsets;
        self.events += other.events;
        self.other += other.other;
        self.refused += other.refused;
        self.aside += other.aside;
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    #[serde(default)]
    stage: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: AuditUser,
    object_ref: Option<ObjectRef>,
    response_status: Option<ResponseStatus>,
}

#[derive(Default, Deserialize)]
struct AuditUser {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    subresource: Option<String>,
    namespace: Option<String>,
}

#[derive(Deserialize)]
struct ResponseStatus {
    code: Option<u16>,
}

/// Counts `user`'s writes in the complete lines of `text` (JSON audit events,
/// one a line). Returns the counts and how many bytes of `text` were whole
/// lines: a line the API server is still writing is left for the next read.
pub fn count_writes(text: &str, user: &str, aside: Option<&str>) -> (Writes, usize) {
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    let mut writes = Writes::default();
    for line in text[..complete].lines() {
        let Ok(event) = serde_json::from_str::<AuditEvent>(line) else {
            continue;
        };
        if event.stage != "ResponseComplete"
            || event.user.username != user
            || !WRITE_VERBS.contains(&event.verb.as_str())
        {
            continue;
        }
        let (resource, subresource, namespace) =
            event.object_ref.as_ref().map_or(("", None, None), |o| {
                (
                    o.resource.as_str(),
                    o.subresource.as_deref(),
                    o.namespace.as_deref(),
                )
            });
        match (resource, subresource) {
            _ if aside.is_some() && namespace == aside => writes.aside += 1,
            ("deployments", None) => writes.deployments += 1,
            ("podsets", Some("status")) => writes.podset_status += 1,
            ("podsets", None) => writes.podsets += 1,
            ("events", None) => writes.events += 1,
            _ => writes.other += 1,
        }
        if event
            .response_status
            .and_then(|s| s.code)
            .is_some_and(|code| code >= 400)
        {
            writes.refused += 1;
        }
    }
    (writes, complete)
}

/// Reads an audit log as it grows: each `read` counts the writes logged since
/// the previous one.
pub struct AuditTail {
    path: PathBuf,
    user: String,
    offset: u64,
    aside: Option<String>,
}

impl AuditTail {
    /// Starts at the log's current end: what is logged from now on counts.
    pub fn from_end(path: PathBuf, user: &str) -> anyhow::Result<Self> {
        let offset = std::fs::metadata(&path).map_or(0, |m| m.len());
        Ok(AuditTail {
            path,
            user: user.to_string(),
            offset,
            aside: None,
        })
    }

    /// Counts the writes in `namespace` apart (`Writes::aside`).
    pub fn setting_aside(mut self, namespace: &str) -> Self {
        self.aside = Some(namespace.to_string());
        self
    }

    /// The writes logged since the last call (or since `from_end`).
    pub fn read(&mut self) -> anyhow::Result<Writes> {
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Writes::default()),
            Err(e) => return Err(e).with_context(|| format!("opening {}", self.path.display())),
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", self.path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        let (writes, consumed) = count_writes(&text, &self.user, self.aside.as_deref());
        self.offset += consumed as u64;
        Ok(writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "reconciler-bench-controller";

    fn line(
        stage: &str,
        verb: &str,
        user: &str,
        resource: &str,
        sub: Option<&str>,
        code: u16,
    ) -> String {
        let mut object_ref =
            serde_json::json!({"resource": resource, "namespace": "bench", "name": "ps-1"});
        if let Some(sub) = sub {
            object_ref["subresource"] = sub.into();
        }
        serde_json::json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "stage": stage, "verb": verb, "user": {"username": user, "groups": ["system:masters"]},
            "objectRef": object_ref, "responseStatus": {"metadata": {}, "code": code},
        })
        .to_string()
            + "\n"
    }

    #[test]
    fn counts_the_controllers_completed_writes_by_resource() {
        let log = [
            line("ResponseComplete", "patch", ME, "deployments", None, 200),
            line("ResponseComplete", "patch", ME, "deployments", None, 201),
            line(
                "ResponseComplete",
                "patch",
                ME,
                "podsets",
                Some("status"),
                200,
            ),
            line("ResponseComplete", "create", ME, "events", None, 201),
            line("ResponseComplete", "update", ME, "leases", None, 200),
            line("ResponseComplete", "patch", ME, "podsets", None, 200),
            // refused: still a write the API server handled
            line("ResponseComplete", "patch", ME, "deployments", None, 409),
        ]
        .concat();
        let (writes, consumed) = count_writes(&log, ME, None);
        assert_eq!(
            writes,
            Writes {
                deployments: 3,
                podset_status: 1,
                podsets: 1,
                events: 1,
                other: 1,
                refused: 1,
                aside: 0,
            }
        );
        assert_eq!(writes.total(), 7);
        assert_eq!(writes.objects(), 6);
        assert_eq!(consumed, log.len());
    }

    #[test]
    fn writes_in_the_namespace_set_aside_are_counted_apart() {
        let log = [
            line("ResponseComplete", "patch", ME, "deployments", None, 200),
            line("ResponseComplete", "update", ME, "leases", None, 200),
        ]
        .concat();
        let (aside, _) = count_writes(&log, ME, Some("bench"));
        assert_eq!((aside.aside, aside.objects(), aside.total()), (2, 0, 2));
        let (kept, _) = count_writes(&log, ME, Some("elsewhere"));
        assert_eq!((kept.aside, kept.objects(), kept.total()), (0, 1, 2));
    }

    #[test]
    fn reads_other_users_and_other_stages_are_not_writes() {
        let log = [
            line("ResponseComplete", "list", ME, "pods", None, 200),
            line("ResponseComplete", "watch", ME, "pods", None, 200),
            line("ResponseComplete", "get", ME, "deployments", None, 200),
            line("ResponseStarted", "patch", ME, "deployments", None, 200),
            line(
                "ResponseComplete",
                "patch",
                "admin",
                "deployments",
                None,
                200,
            ),
            line(
                "ResponseComplete",
                "create",
                "system:kube-controller-manager",
                "pods",
                None,
                201,
            ),
            "not json at all\n".to_string(),
        ]
        .concat();
        assert_eq!(count_writes(&log, ME, None).0, Writes::default());
    }

    #[test]
    fn a_line_still_being_written_is_left_for_the_next_read() {
        let whole = line("ResponseComplete", "patch", ME, "deployments", None, 200);
        let partial = &line("ResponseComplete", "create", ME, "events", None, 201)[..40];
        let text = format!("{whole}{partial}");
        let (writes, consumed) = count_writes(&text, ME, None);
        assert_eq!(writes.deployments, 1);
        assert_eq!(writes.events, 0);
        assert_eq!(consumed, whole.len());
    }

    #[test]
    fn a_tail_counts_only_what_was_logged_after_it_started() {
        let dir = std::env::temp_dir().join(format!("bench-cluster-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        std::fs::write(
            &path,
            line("ResponseComplete", "patch", ME, "deployments", None, 200),
        )
        .unwrap();
        let mut tail = AuditTail::from_end(path.clone(), ME).unwrap();
        assert_eq!(tail.read().unwrap(), Writes::default());
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(
            &mut file,
            line("ResponseComplete", "create", ME, "events", None, 201).as_bytes(),
        )
        .unwrap();
        assert_eq!(tail.read().unwrap().events, 1);
        assert_eq!(tail.read().unwrap(), Writes::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
