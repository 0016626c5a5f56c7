//! A token bucket in front of one cluster's client: at most `qps` requests
//! a second on average, bursts of up to `burst`.
//!
//! Every member cluster gets a client, and with it a bucket, of its own:
//! a member the host floods with work (thousands of objects after an
//! outage) is slowed at its own limit and never spends another member's.
//! It protects the member's API server from the host, as client-go's
//! limiter does, without the host waiting on anything shared.
//!
//! The bucket sits under kube's `Buffer`, whose one worker asks the service
//! whether it is ready before each request: waiting here holds back that
//! client's requests in order, and a watch counts once, when it starts.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// A client's request rate: `qps` on average, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub qps: f64,
    pub burst: u32,
}

impl RateLimit {
    /// `None` for a qps of 0: no limit.
    pub fn new(qps: f64, burst: u32) -> Option<Self> {
        (qps > 0.0).then_some(Self {
            qps,
            burst: burst.max(1),
        })
    }
}

/// Wraps a client's service in a [`RateLimited`].
#[derive(Clone, Copy, Debug)]
pub struct RateLimitLayer(pub RateLimit);

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: Bucket::full(self.0),
            permit: false,
            sleep: None,
        }
    }
}

/// The tokens a client has: `burst` at most, refilled at `qps`.
#[derive(Debug)]
struct Bucket {
    limit: RateLimit,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(limit: RateLimit) -> Self {
        Self {
            limit,
            tokens: f64::from(limit.burst),
            at: Instant::now(),
        }
    }

    /// Takes a token, or says how long until there is one.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limit.qps).min(f64::from(self.limit.burst));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.limit.qps,
            ))
        }
    }
}

/// A service that sends a request only with a token from its bucket.
pub struct RateLimited<S> {
    inner: S,
    bucket: Bucket,
    /// A token taken for the next call.
    permit: bool,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.permit {
            if let Some(sleep) = &mut self.sleep {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.permit = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.permit = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tower::ServiceExt as _;

    use super::*;

    #[test]
    fn no_qps_is_no_limit() {
        assert_eq!(RateLimit::new(0.0, 10), None);
        assert_eq!(RateLimit::new(5.0, 0).unwrap().burst, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = sent.clone();
        let service = tower::service_fn(move |_: ()| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::convert::Infallible>(()) }
        });
        let mut limited = RateLimitLayer(RateLimit::new(10.0, 5).unwrap()).layer(service);
        let start = Instant::now();
        for _ in 0..25 {
            limited.ready().await.unwrap().call(()).await.unwrap();
        }
        // 5 at once, then 20 more at 10 a second.
        let took = start.elapsed();
        assert_eq!(sent.load(Ordering::SeqCst), 25);
        assert!(
            took >= Duration::from_millis(1_990) && took <= Duration::from_millis(2_100),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn two_clients_have_two_buckets() {
        let service = || tower::service_fn(|_: ()| async { Ok::<_, std::convert::Infallible>(()) });
        let limit = RateLimitLayer(RateLimit::new(1.0, 1).unwrap());
        let (mut busy, mut idle) = (limit.layer(service()), limit.layer(service()));
        busy.ready().await.unwrap().call(()).await.unwrap();
        // The busy client's bucket is empty; the other's is not.
        let start = Instant::now();
        idle.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
        busy.ready().await.unwrap().call(()).await.unwrap();
        assert!(start.elapsed() >= Duration::from_millis(990));
    }
}
