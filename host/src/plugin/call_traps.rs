//! The traps a plugin call ends with on the host's behalf, which the caller
//! tells apart from the plugin's own failures: a call that had to wait on a
//! thread that may not block is made again where it may, and one that waited
//! past its deadline is a timeout. The host functions raise them
//! (`bounded_waits`, `worker_safe_io`, `call_state`); the call classifies
//! them.

/// The marker a call that may not block traps with when a WASI function
/// would have to wait; the call is then made again where it may.
#[derive(Debug, thiserror::Error)]
#[error("the plugin called a WASI function that had to wait, on a thread that may not block")]
pub(crate) struct NeedsBlockingThread;

/// The marker a refused wait traps with; `classify` turns the call's failure
/// into `CallError::Timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the plugin waited past its deadline")]
pub(crate) struct WaitedPastDeadline;
