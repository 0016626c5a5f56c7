//! The `--clusters-dir` source: one kubeconfig file per member, written
//! by the operator, followed as the directory changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use super::described::{Described, SourceKind, valid_member_name};
use crate::fleet::member::Identity;
use crate::fleet::selection::{CLUSTER_LABEL, FILE_LABEL};

/// Follows `dir`: one kubeconfig file per member, named by the file's
/// name up to its first dot.
pub(super) async fn follow_dir(
    dir: PathBuf,
    tx: mpsc::UnboundedSender<(SourceKind, Vec<Described>)>,
) {
    let (changes_tx, mut changes) = mpsc::unbounded_channel();
    let _watch = crate::support::dir_watch::watch_dir(&dir, changes_tx);
    loop {
        let _ = tx.send((SourceKind::Files, read_dir_members(&dir)));
        if changes.recv().await.is_none() {
            return;
        }
        while changes.try_recv().is_ok() {}
    }
}

/// The members the files of `dir` describe, in file name order (two files
/// may name one member: the first keeps it); unreadable files are named in
/// a warning and left out.
pub fn read_dir_members(dir: &Path) -> Vec<Described> {
    let mut members = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!("cannot read --clusters-dir {}: {e}", dir.display());
            return members;
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    for file in files {
        let file_name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = file_name.split('.').next().unwrap_or_default().to_string();
        if let Err(why) = valid_member_name(&name) {
            tracing::warn!(
                "{}: cluster name {name:?} is not usable: {why}",
                file.display()
            );
            continue;
        }
        let kubeconfig = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!("cannot read {}: {e}", file.display());
                continue;
            }
        };
        let labels = BTreeMap::from([
            (CLUSTER_LABEL.to_string(), name.clone()),
            (FILE_LABEL.to_string(), file_name.clone()),
        ]);
        members.push(Described {
            identity: Identity {
                name,
                labels,
                source: format!("file {}", file.display()),
                server: String::new(),
            },
            kubeconfig: Some(kubeconfig),
            secret: None,
            order: file_name,
        });
    }
    members
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_clusters_directory_names_members_by_file_and_skips_what_it_cannot_use() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("east.kubeconfig"), "east-config").unwrap();
        std::fs::write(dir.path().join("west.prod.yaml"), "west-config").unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), "x").unwrap();
        std::fs::write(dir.path().join("-bad.yaml"), "x").unwrap();
        let members = read_dir_members(dir.path());
        assert_eq!(
            members
                .iter()
                .map(|d| d.identity.name.as_str())
                .collect::<Vec<_>>(),
            ["east", "west"],
            "{members:?}"
        );
        let west = &members[1];
        assert_eq!(west.kubeconfig.as_deref(), Some("west-config"));
        assert_eq!(
            west.identity.labels,
            BTreeMap::from([
                (CLUSTER_LABEL.to_string(), "west".to_string()),
                (FILE_LABEL.to_string(), "west.prod.yaml".to_string()),
            ])
        );
    }
}
