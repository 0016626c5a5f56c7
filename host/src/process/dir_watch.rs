//! Watching a directory for changes, debounced.
//!
//! Callers rescan the whole directory on every batch instead of interpreting
//! individual events: editors write-and-rename, `cp` writes in several
//! chunks, and Kubernetes ConfigMap volumes swap a `..data` symlink without
//! any visible file name changing. A rescan that compares content handles
//! all of them the same way.

use std::path::Path;
use std::time::Duration;

use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache};
use tokio::sync::mpsc::UnboundedSender;

/// How long a directory must be quiet before a batch is delivered. Short,
/// because a rescan is cheap and safe: files are compared by content, a file
/// still being written fails validation or changes under the read and is
/// picked up by its next event. So the window only merges bursts; it is not
/// what protects against half-written files, and every millisecond of it is
/// added to the time a new plugin version takes to go live.
pub const DEBOUNCE: Duration = Duration::from_millis(25);

/// Keeps the watch alive while held.
pub type DirWatch = Debouncer<RecommendedWatcher, RecommendedCache>;

/// Sends `()` on `tx` after every debounced batch of changes in `dir`. A
/// directory that cannot be watched is logged and `None` returned: the
/// caller keeps running, without live updates.
pub fn watch_dir(dir: &Path, tx: UnboundedSender<()>) -> Option<DirWatch> {
    let handler = move |result: DebounceEventResult| match result {
        // Opening and reading a file is no change. Every rescan reads each
        // file, so counting those would have each rescan start the next:
        // a host re-reading and hashing its plugins without end.
        Ok(events) if events.iter().any(|e| !e.kind.is_access()) => {
            let _ = tx.send(());
        }
        Ok(_) => {}
        Err(errors) => {
            for e in errors {
                tracing::warn!("watching for changes: {e}");
            }
            // Something may have changed unseen: rescan.
            let _ = tx.send(());
        }
    };
    let mut debouncer = match notify_debouncer_full::new_debouncer(DEBOUNCE, None, handler) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("cannot watch {} for changes: {e}", dir.display());
            return None;
        }
    };
    if let Err(e) = debouncer.watch(dir, RecursiveMode::NonRecursive) {
        tracing::warn!("cannot watch {} for changes: {e}", dir.display());
        return None;
    }
    Some(debouncer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reading_a_file_is_no_change() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plugin.wasm");
        std::fs::write(&file, b"first").unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let _watch = watch_dir(dir.path(), tx).expect("a watch");
        let quiet = Duration::from_millis(300);
        // Settle whatever the setup left behind.
        tokio::time::sleep(quiet).await;
        while rx.try_recv().is_ok() {}

        // What every rescan does: read each file. It must not be taken for a
        // change, or each rescan would bring on the next one.
        let _ = std::fs::read(&file).unwrap();
        tokio::time::sleep(quiet).await;
        assert!(rx.try_recv().is_err(), "a read was reported as a change");

        std::fs::write(&file, b"second").unwrap();
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a write is reported")
            .expect("the watch is alive");
    }
}
