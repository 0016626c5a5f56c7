//! Loading every plugin in a plugins directory.
//!
//! Each file loads or fails on its own: a broken plugin is reported by file
//! name and reason, and the others are served. The host scans `*.wasm` files
//! directly in the directory (not below it), skipping dotfiles, which is
//! where editors and `kubectl cp` keep their temporary files.

use std::path::{Path, PathBuf};

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
    let mut loaded = Vec::new();
    let mut failed = Vec::new();
    for file in plugin_files(dir)? {
        match sandbox.load(&file) {
            Ok(plugin) => {
                if let Some(twin) = loaded
                    .iter()
                    .find(|p: &&LoadedPlugin| p.name() == plugin.name())
                {
                    failed.push(LoadError {
                        path: file.clone(),
                        reason: LoadFailure::Link(format!(
                            "plugin name {:?} is already taken by {}",
                            plugin.name(),
                            twin.path().display()
                        )),
                    });
                    continue;
                }
                loaded.push(plugin);
            }
            Err(e) => failed.push(e),
        }
    }
    Ok((loaded, failed))
}
