//! Turning a panic in the host, while it reconciles one object, into a
//! failure of that reconcile.
//!
//! A panic is a bug of the host, not of the plugin; but the data that
//! triggers it came from a plugin or a cluster, and it must cost that one
//! reconcile, not the process (`simulate` exiting 101) nor the queue's
//! bookkeeping (a `dev` worker dying with the object marked in flight, so
//! it is never reconciled again). The caller records the failure, retries
//! the object with backoff, and says it is a bug to report.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

/// Runs `future`; a panic inside it becomes `Err` with the panic message.
///
/// Unwind safety is asserted: what a reconcile shares (queues, caches)
/// sits behind mutexes whose users all recover from poisoning, and the
/// object's bookkeeping is done by the caller after this returns.
pub async fn catch_panic<F: Future>(future: F) -> Result<F::Output, String> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|payload| panic_message(&*payload))
}

/// The message a panic was raised with.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(no message)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_its_message_and_a_value_passes_through() {
        assert_eq!(catch_panic(async { 7 }).await, Ok(7));
        let text = catch_panic(async {
            let depth = 128;
            if depth > 0 {
                panic!("recursion limit exceeded at {depth}");
            }
        })
        .await;
        assert_eq!(text, Err("recursion limit exceeded at 128".to_string()));
    }
}
