//! Loading every plugin in a plugins directory.
//!
//! Each file loads or fails on its own: a broken plugin is reported by file
//! name and reason, and the others are served. The host scans `*.wasm` files
//! directly in the directory (not below it), skipping dotfiles, which is
//! where editors and `kubectl cp` keep their temporary files.

use std::path::{Path, PathBuf};

use reconciler_contract::KindRef;

use super::errors::{LoadError, LoadFailure};
use super::loaded::LoadedPlugin;
use super::sandbox::Sandbox;

/// The plugin files of `dir`, sorted by name.
pub fn plugin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_plugin_file(p) && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// A `*.wasm` name that is not a dotfile.
pub fn is_plugin_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && path.extension().is_some_and(|e| e == "wasm")
}

/// Every plugin of `dir` that loads, and the errors of those that do not.
pub fn load_dir(
    sandbox: &Sandbox,
    dir: &Path,
) -> std::io::Result<(Vec<LoadedPlugin>, Vec<LoadError>)> {
    Ok(load_files(sandbox, &plugin_files(dir)?))
}

/// Every plugin of `files` that loads, in order, and the errors of those
/// that do not. As `dev` does with a plugins directory, a file whose plugin
/// has the name or the primary kind of one loaded from an earlier file is
/// refused, naming that file, and the others are served.
pub fn load_files(sandbox: &Sandbox, files: &[PathBuf]) -> (Vec<LoadedPlugin>, Vec<LoadError>) {
    let mut loaded: Vec<LoadedPlugin> = Vec::new();
    let mut failed = Vec::new();
    for file in files {
        let plugin = match sandbox.load(file) {
            Ok(plugin) => plugin,
            Err(e) => {
                failed.push(e);
                continue;
            }
        };
        let earlier: Vec<&LoadedPlugin> = loaded.iter().collect();
        if let Some(reason) = twin_of(&plugin, &earlier) {
            failed.push(LoadError {
                path: file.clone(),
                reason,
            });
            continue;
        }
        loaded.push(plugin);
    }
    (loaded, failed)
}

/// Splits `files` into plugin files and candidate files
/// (`NAME.candidate.wasm`, see [`super::candidates`]).
pub fn split_candidates(files: Vec<PathBuf>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    files
        .into_iter()
        .partition(|f| super::candidates::serving_file_of(f).is_none())
}

/// Every candidate of `files` that loads and fits the plugin its serving
/// file serves among `plugins`, and the errors of the others.
pub fn load_candidates(
    sandbox: &Sandbox,
    files: &[PathBuf],
    plugins: &[LoadedPlugin],
) -> (Vec<LoadedPlugin>, Vec<LoadError>) {
    let mut loaded = Vec::new();
    let mut failed = Vec::new();
    for file in files {
        let candidate = match sandbox.load(file) {
            Ok(candidate) => candidate,
            Err(e) => {
                failed.push(e);
                continue;
            }
        };
        let Some(serving_file) = super::candidates::serving_file_of(file) else {
            continue;
        };
        let serving = plugins.iter().find(|p| p.path() == serving_file);
        match super::candidates::misfit(&candidate, serving, &serving_file) {
            Some(reason) => failed.push(LoadError {
                path: file.clone(),
                reason: LoadFailure::Candidate(reason),
            }),
            None => loaded.push(candidate),
        }
    }
    (loaded, failed)
}

/// Why `plugin` cannot serve beside `loaded`: a name or a primary kind
/// already taken.
pub(crate) fn twin_of(plugin: &LoadedPlugin, loaded: &[&LoadedPlugin]) -> Option<LoadFailure> {
    if let Some(first) = loaded.iter().find(|p| p.name() == plugin.name()) {
        return Some(LoadFailure::NameTaken {
            name: plugin.name().to_string(),
            first: first.path().to_path_buf(),
        });
    }
    let primary = &plugin.metadata().primary;
    loaded
        .iter()
        .find(|p| p.metadata().primary.same_group_kind(primary))
        .map(|first| LoadFailure::PrimaryTaken {
            name: plugin.name().to_string(),
            kind: primary_kind_taken(primary, &first.metadata().primary),
            first_name: first.name().to_string(),
            first: first.path().to_path_buf(),
        })
}

/// How a refusal names a primary kind another plugin reconciles as
/// `taken`: `example.com/v1 PodSet`, or `example.com/v1 PodSet, the same
/// kind as example.com/v1alpha1 PodSet` when the versions differ.
fn primary_kind_taken(kind: &KindRef, taken: &KindRef) -> String {
    if kind == taken {
        kind.to_string()
    } else {
        format!("{kind}, the same kind as {taken}")
    }
}
