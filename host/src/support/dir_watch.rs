//! Watching a directory for changes, debounced.
//!
//! Callers rescan the whole directory on every batch instead of interpreting
//! individual events: editors write-and-rename, `cp` writes in several
//! chunks, and Kubernetes ConfigMap volumes swap a `..data` symlink without
//! any visible file name changing. A rescan that compares content handles
//! all of them the same way.
//!
//! The batching is done here rather than by a polling debouncer: a debouncer
//! that wakes every quarter of its window (notify-debouncer's loop) costs an
//! idle host 160 wake-ups a second for a directory that rarely changes. This
//! one blocks until an event arrives and sleeps only while a batch is open.

use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

/// How long a directory must be quiet before a batch is delivered. Short,
/// because a rescan is cheap and safe: files are compared by content, a file
/// still being written fails validation or changes under the read and is
/// picked up by its next event. So the window only merges bursts; it is not
/// what protects against half-written files, and every millisecond of it is
/// added to the time a new plugin version takes to go live.
pub const DEBOUNCE: Duration = Duration::from_millis(25);

/// Keeps the watch alive while held. Dropping it stops the watch, and the
/// batching thread with it.
pub struct DirWatch {
    _watcher: RecommendedWatcher,
}

/// What the watcher passes to the batching thread.
enum Seen {
    /// Something in the directory changed.
    Change,
    /// The watch failed or lost events: something may have changed unseen.
    Error(notify::Error),
}

/// Sends `()` on `tx` after every debounced batch of changes in `dir`. A
/// directory that cannot be watched is logged and `None` returned: the
/// caller keeps running, without live updates.
pub fn watch_dir(dir: &Path, tx: UnboundedSender<()>) -> Option<DirWatch> {
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    let mut watcher = match notify::recommended_watcher(forward(seen_tx)) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("cannot watch {} for changes: {e}", dir.display());
            return None;
        }
    };
    if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
        tracing::warn!("cannot watch {} for changes: {e}", dir.display());
        return None;
    }
    let spawned = std::thread::Builder::new()
        .name("plugin-dir-watch".into())
        .spawn(move || batch(&seen_rx, &tx, DEBOUNCE));
    if let Err(e) = spawned {
        tracing::warn!("cannot watch {} for changes: {e}", dir.display());
        return None;
    }
    Some(DirWatch { _watcher: watcher })
}

/// The watcher's handler: changes and errors go to the batching thread.
fn forward(seen: Sender<Seen>) -> impl FnMut(notify::Result<notify::Event>) + Send + 'static {
    move |event| {
        let seen_now = match event {
            // Opening and reading a file is no change. Every rescan reads
            // each file, so counting those would have each rescan start the
            // next: a host re-reading and hashing its plugins without end.
            Ok(event) if event.kind.is_access() => return,
            Ok(_) => Seen::Change,
            Err(e) => Seen::Error(e),
        };
        // The batching thread is gone only once the watch is being dropped.
        let _ = seen.send(seen_now);
    }
}

/// Waits for a first event, then until `quiet` has passed without another,
/// and sends one `()` for the batch. Returns when the watcher is dropped or
/// the receiver of batches is gone.
fn batch(seen: &Receiver<Seen>, tx: &UnboundedSender<()>, quiet: Duration) {
    while let Ok(first) = seen.recv() {
        report(first);
        loop {
            match seen.recv_timeout(quiet) {
                Ok(more) => report(more),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = tx.send(());
                    return;
                }
            }
        }
        if tx.send(()).is_err() {
            return;
        }
    }
}

fn report(seen: Seen) {
    if let Seen::Error(e) = seen {
        tracing::warn!("watching for changes: {e}");
    }
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

    fn batches(rx: &mut tokio::sync::mpsc::UnboundedReceiver<()>) -> usize {
        std::iter::from_fn(|| rx.try_recv().ok()).count()
    }

    #[test]
    fn a_burst_of_changes_is_one_batch_and_an_error_is_one_too() {
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let quiet = Duration::from_millis(200);
        let thread = std::thread::spawn(move || batch(&seen_rx, &tx, quiet));

        for _ in 0..5 {
            seen_tx.send(Seen::Change).unwrap();
        }
        std::thread::sleep(quiet * 3);
        assert_eq!(batches(&mut rx), 1, "five changes at once are one rescan");

        std::thread::sleep(quiet * 2);
        assert_eq!(batches(&mut rx), 0, "a quiet directory asks for nothing");

        // Events lost by the watch may hide a change: rescan.
        seen_tx
            .send(Seen::Error(notify::Error::generic("event queue overflow")))
            .unwrap();
        std::thread::sleep(quiet * 3);
        assert_eq!(batches(&mut rx), 1);

        drop(seen_tx);
        thread
            .join()
            .expect("the batching thread ends with its watch");
    }
}
