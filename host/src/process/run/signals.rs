//! The signals that stop `run`, listened for from the moment the command
//! starts.

use std::future::Future;

/// Resolves with the name of the first of SIGTERM or SIGINT to arrive.
///
/// The handlers are installed when this is called, not when the future is
/// first polled: `run` polls it only once it serves, and a SIGTERM that
/// arrived while plugins were still loading must stop the host cleanly,
/// not kill it (the default action). Must be called within the runtime.
pub fn shutdown_signal() -> impl Future<Output = &'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                },
                (term, int) => {
                    let e = term.err().or(int.err()).map(|e| e.to_string());
                    tracing::warn!(
                        "cannot listen for SIGTERM and SIGINT ({}); stop with Ctrl-C",
                        e.unwrap_or_default()
                    );
                    let _ = tokio::signal::ctrl_c().await;
                    "SIGINT"
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}
