//! Which primaries a canary candidate decides for: its share of them.
//!
//! A primary's place in the rollout is a hash of its namespace and name, so
//! every replica and every shard puts it in the same place without asking
//! anyone, and a primary that is the candidate's at 10% stays the
//! candidate's at 50%: each step only adds primaries, and a rollback gives
//! them all back at once. A primary is decided by exactly one version at a
//! time, since one key is reconciled by one worker at a time and the share
//! is read at the start of each reconcile.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Places in a rollout: a share of `n` percent takes the primaries whose
/// place is below `n * PLACES / 100`.
pub const PLACES: u32 = 10_000;

/// A primary's place in every rollout, in `0..PLACES`.
pub fn place(namespace: Option<&str>, name: &str) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(b"reconciler-host canary\0");
    hasher.update(namespace.unwrap_or("").as_bytes());
    hasher.update(b"/");
    hasher.update(name.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(PLACES)) as u32
}

/// The primaries one candidate version decides and writes for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanaryShare {
    /// The candidate version the share was given to: a different version
    /// in the candidate's file decides nothing until its own rollout says so.
    pub candidate_sha256: String,
    /// Percent of the eligible primaries, 0 to 100.
    pub percent: u32,
    /// Only primaries in these namespaces are eligible (all when empty).
    pub namespaces: BTreeSet<String>,
    /// Only primaries carrying these labels are eligible.
    pub match_labels: BTreeMap<String, String>,
    /// Only primaries in a cluster whose labels one of these selects are
    /// eligible (all clusters when empty): the waves reached so far.
    pub clusters: Vec<BTreeMap<String, String>>,
}

impl CanaryShare {
    /// Whether the primary `object` (named `namespace`/`name`), in the
    /// cluster labelled `cluster`, is the candidate's.
    pub fn takes(
        &self,
        namespace: Option<&str>,
        name: &str,
        object: &Value,
        cluster: &BTreeMap<String, String>,
    ) -> bool {
        if self.percent == 0 {
            return false;
        }
        let selects =
            |wave: &BTreeMap<String, String>| wave.iter().all(|(k, v)| cluster.get(k) == Some(v));
        if !self.clusters.is_empty() && !self.clusters.iter().any(selects) {
            return false;
        }
        if !self.namespaces.is_empty() && !namespace.is_some_and(|ns| self.namespaces.contains(ns))
        {
            return false;
        }
        let labels = &object["metadata"]["labels"];
        if !self
            .match_labels
            .iter()
            .all(|(k, v)| labels[k].as_str() == Some(v.as_str()))
        {
            return false;
        }
        place(namespace, name) < self.percent.min(100) * (PLACES / 100)
    }

    /// A short fingerprint that changes whenever the share does.
    pub fn fingerprint(&self) -> String {
        format!(
            "{}@{}%{:?}{:?}{:?}",
            self.candidate_sha256, self.percent, self.namespaces, self.match_labels, self.clusters
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn share(percent: u32) -> CanaryShare {
        CanaryShare {
            candidate_sha256: "c".into(),
            percent,
            namespaces: BTreeSet::new(),
            match_labels: BTreeMap::new(),
            clusters: Vec::new(),
        }
    }

    #[test]
    fn a_share_takes_about_its_percent_and_each_step_only_adds() {
        let names: Vec<String> = (0..10_000).map(|i| format!("podset-{i}")).collect();
        let taken = |percent| -> BTreeSet<&String> {
            names
                .iter()
                .filter(|n| share(percent).takes(Some("default"), n, &json!({}), &BTreeMap::new()))
                .collect()
        };
        let (ten, fifty, all) = (taken(10), taken(50), taken(100));
        assert!((900..=1100).contains(&ten.len()), "{}", ten.len());
        assert!((4700..=5300).contains(&fifty.len()), "{}", fifty.len());
        assert_eq!(all.len(), names.len());
        assert!(ten.is_subset(&fifty) && fifty.is_subset(&all));
        assert!(taken(0).is_empty());
    }

    #[test]
    fn namespaces_and_labels_limit_who_is_eligible() {
        let mut s = share(100);
        s.namespaces.insert("staging".into());
        s.match_labels.insert("tier".into(), "canary".into());
        let labelled = json!({"metadata": {"labels": {"tier": "canary"}}});
        let any = BTreeMap::new();
        assert!(s.takes(Some("staging"), "a", &labelled, &any));
        assert!(!s.takes(Some("prod"), "a", &labelled, &any));
        assert!(!s.takes(Some("staging"), "a", &json!({}), &any));
        assert!(!s.takes(None, "a", &labelled, &any));
    }
}
