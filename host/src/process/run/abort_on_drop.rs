//! The tasks `run` starts beside its loop (pulling plugins, following the
//! shard ring) live exactly as long as the handle kept for them, however
//! `run` ends.

/// Aborts its task when dropped.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
