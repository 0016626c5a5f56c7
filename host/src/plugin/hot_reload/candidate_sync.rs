//! The candidate files of a plugins directory: each `NAME.candidate.wasm`
//! is loaded and validated as any version is, and runs in shadow only
//! while `NAME.wasm` serves a plugin of the same name and primary kind.
//! A candidate that does not fit its serving file (another name, another
//! kind, no serving file yet) is refused with the reason and tried again
//! whenever what serves changes; one whose plugin stops serving stops too.

use std::path::{Path, PathBuf};

use super::{PluginDirectory, ReloadEvent, Served};
use crate::plugin::candidates::{misfit, serving_file_of};
use crate::plugin::plugin_host::Refusal;
use crate::plugin::sandbox::content_hash;

impl PluginDirectory {
    /// Brings the candidates in line with `files` (every candidate file
    /// found). `served_changed`: what serves changed in this sync, so
    /// candidates refused for not fitting are tried again.
    pub(super) async fn sync_candidates(
        &mut self,
        files: &[PathBuf],
        served_changed: bool,
    ) -> Vec<ReloadEvent> {
        let mut events = Vec::new();
        // A held candidate whose plugin no longer serves, or serves under
        // another name or kind, steps down; its file stays and is tried
        // again below as any refused one.
        let unfit: Vec<PathBuf> = self
            .candidates
            .iter()
            .filter(|(file, c)| !files.contains(file) || self.misfit(file, c).is_some())
            .map(|(file, _)| file.clone())
            .collect();
        for file in unfit {
            if let Some(candidate) = self.candidates.remove(&file) {
                events.push(ReloadEvent::CandidateUnloaded {
                    file,
                    name: candidate.name,
                });
            }
        }
        if served_changed || !events.is_empty() {
            self.refused
                .retain(|f, r| !(files.contains(f) && r.why.waits_for_what_serves()));
        }
        for file in files {
            if let Some(event) = self.sync_candidate(file).await {
                events.push(event);
            }
        }
        events
    }

    /// Why `candidate` cannot run beside what `file`'s serving file
    /// serves; `None` when it can.
    fn misfit(&self, file: &Path, candidate: &Served) -> Option<String> {
        let serving_file = serving_file_of(file)?;
        let serving = self.served.get(&serving_file).map(|s| s.plugin.as_ref());
        misfit(&candidate.plugin, serving, &serving_file)
    }

    /// Loads one candidate file when its content is new, and holds it if it
    /// fits its serving file.
    async fn sync_candidate(&mut self, file: &Path) -> Option<ReloadEvent> {
        let bytes = std::fs::read(file).ok()?;
        let sha256 = content_hash(&bytes);
        if self
            .candidates
            .get(file)
            .is_some_and(|c| c.sha256 == sha256)
            || self.refused.get(file).is_some_and(|r| r.sha256 == sha256)
        {
            return None;
        }
        let plugin = match self.load(file, bytes, &sha256).await {
            Ok(plugin) => plugin?,
            Err(refused) => return Some(refused),
        };
        let candidate = Served::of(plugin, sha256.clone());
        if let Some(reason) = self.misfit(file, &candidate) {
            self.candidates.remove(file);
            let serving = serving_file_of(file).is_some_and(|f| self.served.contains_key(&f));
            let why = match serving {
                true => Refusal::Conflict,
                false => Refusal::NoServingVersion,
            };
            return Some(self.refuse(file, sha256, reason, why));
        }
        let serving_version = serving_file_of(file)
            .and_then(|f| self.served.get(&f))
            .map(|s| s.version.clone())
            .unwrap_or_default();
        self.refused.remove(file);
        self.candidates
            .insert(file.to_path_buf(), candidate.clone());
        Some(ReloadEvent::CandidateLoaded {
            file: file.to_path_buf(),
            name: candidate.name,
            version: candidate.version,
            sha256,
            serving_version,
        })
    }
}
