//! Candidate versions: a plugin's next version running beside the one
//! serving, deciding on the same inputs and never applying (shadow), or
//! deciding and writing for a share of the primaries (canary).
//!
//! A candidate is a file named `NAME.candidate.wasm` beside the serving
//! file `NAME.wasm` (a Plugin's `spec.rollout.candidate` is pulled into
//! such a file too), so it reaches the host by the same road as every
//! version: compiled and validated by the plugins directory, refused with
//! a reason when it cannot stand in for the version it shadows. The
//! directory publishes its decision here; every engine (one per member
//! cluster) reads it at each reconcile, so a candidate needs no wiring of
//! its own through leader election or the fleet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::canary_share::CanaryShare;
use super::loaded::LoadedPlugin;

/// The suffix that makes a file a candidate rather than a plugin.
pub const CANDIDATE_SUFFIX: &str = ".candidate.wasm";

/// The serving file a candidate file stands beside (`podset.candidate.wasm`
/// -> `podset.wasm`); `None` for a file that is no candidate.
pub fn serving_file_of(candidate: &Path) -> Option<PathBuf> {
    let name = candidate.file_name()?.to_str()?;
    let stem = name.strip_suffix(CANDIDATE_SUFFIX)?;
    if stem.is_empty() || stem.starts_with('.') {
        return None;
    }
    Some(candidate.with_file_name(format!("{stem}.wasm")))
}

/// Why `candidate` cannot run in shadow beside `serving`, the plugin its
/// serving file `serving_file` serves (`None`: that file serves none);
/// `None` when it can.
pub fn misfit(
    candidate: &LoadedPlugin,
    serving: Option<&LoadedPlugin>,
    serving_file: &Path,
) -> Option<String> {
    let Some(serving) = serving else {
        return Some(format!(
            "a candidate runs beside the plugin its serving file serves, and {} serves none",
            serving_file.display()
        ));
    };
    if serving.name() != candidate.name() {
        return Some(format!(
            "the candidate is plugin {}, but {} serves plugin {}: a candidate is a version of the plugin it stands beside",
            candidate.name(),
            serving_file.display(),
            serving.name()
        ));
    }
    let (s, c) = (&serving.metadata().primary, &candidate.metadata().primary);
    if !s.same_group_kind(c) {
        return Some(format!(
            "the candidate reconciles {c}, the serving version reconciles {s}: not two versions of one plugin"
        ));
    }
    None
}

/// A primary, as a canary share judges it.
#[derive(Clone, Copy)]
pub struct PrimaryRef<'a> {
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub object: &'a serde_json::Value,
}

/// The candidates the directory decided on, by the name of the plugin each
/// shadows, and the share of primaries a canary candidate decides for.
/// Cheap to share and to read.
#[derive(Default)]
pub struct Candidates {
    by_plugin: RwLock<BTreeMap<String, Arc<LoadedPlugin>>>,
    /// Set by a canary rollout (a Plugin's `spec.rollout`), by plugin name.
    shares: RwLock<BTreeMap<String, CanaryShare>>,
    /// Bumped whenever a candidate comes, goes or changes version: an
    /// engine that sees it move compares every primary of the plugins
    /// whose candidate is new.
    generation: AtomicU64,
}

impl Candidates {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The candidate of plugin `name`, if one runs beside it.
    pub fn of(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.read().get(name).cloned()
    }

    /// Replaces every candidate with `candidates`.
    pub fn set(&self, candidates: BTreeMap<String, Arc<LoadedPlugin>>) {
        let mut held = self.by_plugin.write().unwrap_or_else(|e| e.into_inner());
        if versions(&held) != versions(&candidates) {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        *held = candidates;
    }

    /// Gives plugin `name`'s candidate `share` of its primaries to decide
    /// and write for (`None`: none, it only runs in shadow). A change moves
    /// the generation, so every primary of the plugin is reconciled again
    /// by the version that now decides for it.
    pub fn set_share(&self, name: &str, share: Option<CanaryShare>) {
        let mut shares = self.shares.write().unwrap_or_else(|e| e.into_inner());
        if shares.get(name) == share.as_ref() {
            return;
        }
        match share {
            Some(share) => shares.insert(name.to_string(), share),
            None => shares.remove(name),
        };
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// The candidate of plugin `plugin` when it, not the serving version,
    /// decides for `primary` in the cluster labelled `cluster`: it runs
    /// beside the plugin and a canary share given to this very version
    /// takes the primary.
    pub fn deciding_for(
        &self,
        plugin: &str,
        primary: PrimaryRef<'_>,
        cluster: &BTreeMap<String, String>,
    ) -> Option<Arc<LoadedPlugin>> {
        let shares = self.shares.read().unwrap_or_else(|e| e.into_inner());
        let share = shares.get(plugin)?;
        let candidate = self.of(plugin)?;
        let takes = share.takes(primary.namespace, primary.name, primary.object, cluster);
        (candidate.sha256() == share.candidate_sha256 && takes).then_some(candidate)
    }

    /// Every candidate, by the plugin it stands beside.
    pub fn all(&self) -> Vec<(String, Arc<LoadedPlugin>)> {
        self.read()
            .iter()
            .map(|(name, c)| (name.clone(), c.clone()))
            .collect()
    }

    /// Moves whenever the candidates change (see [`Self::versions`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Each candidate's content hash, with the share it decides for when
    /// it has one, by the plugin it stands beside.
    pub fn versions(&self) -> BTreeMap<String, String> {
        let mut versions = versions(&self.read());
        let shares = self.shares.read().unwrap_or_else(|e| e.into_inner());
        for (name, share) in shares.iter() {
            if let Some(version) = versions.get_mut(name) {
                version.push(' ');
                version.push_str(&share.fingerprint());
            }
        }
        versions
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<LoadedPlugin>>> {
        self.by_plugin.read().unwrap_or_else(|e| e.into_inner())
    }
}

fn versions(candidates: &BTreeMap<String, Arc<LoadedPlugin>>) -> BTreeMap<String, String> {
    candidates
        .iter()
        .map(|(name, c)| (name.clone(), c.sha256().to_string()))
        .collect()
}

impl std::fmt::Debug for Candidates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.read().iter().map(|(name, c)| (name, c.sha256())))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_file_names_the_serving_file_beside_it() {
        let of = |p: &str| serving_file_of(Path::new(p));
        assert_eq!(
            of("/plugins/podset.candidate.wasm"),
            Some(PathBuf::from("/plugins/podset.wasm"))
        );
        assert_eq!(
            of("plugin-web.candidate.wasm"),
            Some(PathBuf::from("plugin-web.wasm"))
        );
        assert_eq!(of("/plugins/podset.wasm"), None);
        assert_eq!(of("/plugins/.candidate.wasm"), None);
        assert_eq!(of("/plugins/.x.candidate.wasm"), None);
        assert_eq!(of("/plugins/podset.candidate.wasm.tmp"), None);
    }
}
