//! The queue stage across plugins: which reconcile runs next, which
//! primaries are queued when what this replica serves changes, and what
//! the end of a reconcile does to its object's place in the queue.
//!
//! Each plugin has its own [`WorkQueue`] (dedup, delays, one reconcile per
//! object at a time); this stage picks among them (the earliest ready,
//! among plugins below their concurrency), drops the primaries this
//! replica no longer owns, and settles each reconcile: a success requeues
//! as the plugin asked ([`requeue`](super::requeue) bounds it both ways), a
//! failure backs off, a primary gone is forgotten.

use std::sync::Arc;
use std::time::Duration;

use super::cause::Cause;
use super::controllers::Controller;
use super::failure::Failure;
use super::record::{Change, Outcome};
use super::requeue::{Requeue, RequeuePolicy, at};
use super::shard_labelling::ShardLabelling;
use super::shared::Shared;
use super::work_queue::{BackoffPolicy, PrimaryKey, WorkQueue};
use crate::cluster::ClusterBackend;

/// Says whether this replica may reconcile a primary now.
pub type KeyFilter = Arc<dyn Fn(&PrimaryKey) -> bool + Send + Sync>;

/// What a reconcile that reached its end did: its changes, and the requeue
/// its plugin asked for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Done {
    pub changes: Vec<Change>,
    pub requeue_after: Option<Duration>,
}

/// How the queues are run.
#[derive(Clone, Default)]
pub struct Queues {
    pub backoff: BackoffPolicy,
    pub requeue: RequeuePolicy,
    /// Which primaries this replica may reconcile now (`run --sharding`);
    /// `None`: all of them.
    pub owns: Option<KeyFilter>,
}

/// How a reconcile ended, for its record.
#[derive(Debug, PartialEq, Eq)]
pub struct Settled {
    pub outcome: Outcome,
    /// The requeue the plugin asked for, when it was below the floor and
    /// rate-limited.
    pub rate_limited: Option<Duration>,
}

impl Queues {
    /// The next object ready to reconcile, marked in flight: the earliest
    /// ready across plugins (ties broken by plugin name, then object), among
    /// plugins below their concurrency. A primary this replica does not own
    /// is dropped (and, when it came here under one of its buckets, noted
    /// for relabelling).
    pub fn next_ready<B: ClusterBackend>(
        &self,
        shared: &Shared<B>,
        shards: Option<&ShardLabelling>,
    ) -> Option<(String, PrimaryKey)> {
        let now = shared.now();
        let mut best: Option<(i64, Arc<Controller>, String)> = None;
        for (name, c) in shared.controllers.all() {
            let concurrency = c.concurrency();
            let state = c.state();
            if state.queue.in_flight() >= concurrency {
                continue;
            }
            let Some(at) = state.queue.next_ready_at().filter(|at| *at <= now) else {
                continue;
            };
            drop(state);
            if best.as_ref().is_none_or(|(b, _, _)| at < *b) {
                best = Some((at, c, name));
            }
        }
        let (_, controller, name) = best?;
        let mut state = controller.state();
        loop {
            // Marked in flight before the owner is asked: whoever changes
            // ownership and then looks at what is in flight sees this key
            // either in flight or refused.
            let key = state.queue.pop_ready(now)?;
            match &self.owns {
                Some(owns) if !owns(&key) => {
                    state.queue.done(&key, None);
                    state.queue.forget(&key);
                    if let Some(shards) = shards {
                        let plugin = controller.plugin();
                        let primary = &plugin.metadata().primary;
                        let served = shared.controllers.plugins();
                        let served = served.iter().map(|p| p.metadata());
                        shards.note_stray(&shared.cache, primary, &key, served);
                    }
                }
                _ => return Some((name, key)),
            }
        }
    }

    /// Ends the reconcile of `key` in its queue: `Ok(None)` when the
    /// primary is gone.
    pub fn settle(
        &self,
        queue: &mut WorkQueue,
        key: &PrimaryKey,
        result: Result<Option<Done>, Failure>,
        now: i64,
    ) -> Settled {
        let mut rate_limited = None;
        let outcome = match result {
            Ok(Some(Done {
                changes,
                requeue_after: asked,
            })) => {
                queue.succeed(key);
                let requeue = self.requeue.next(asked, queue, key);
                if let Some(Requeue::RateLimited { .. }) = requeue {
                    rate_limited = asked;
                }
                let requeue_after = requeue.as_ref().map(Requeue::delay);
                queue.done(key, requeue_after.map(|d| (at(now, d), Cause::Requeue)));
                Outcome::Applied {
                    changes,
                    requeue_after,
                }
            }
            Ok(None) => {
                queue.forget(key);
                queue.done(key, None);
                Outcome::Gone
            }
            Err(Failure { reason, message }) => {
                let failures = queue.fail(key);
                let retry_in = self.backoff.delay(failures);
                queue.done(key, Some((at(now, retry_in), Cause::Retry)));
                Outcome::Failed {
                    reason,
                    message,
                    failures,
                    retry_in,
                }
            }
        };
        Settled {
            outcome,
            rate_limited,
        }
    }

    /// Ends, as a failure, the reconcile of `key` that panicked, unless its
    /// bookkeeping was done before the panic; returns its failures so far.
    pub fn settle_panic(&self, queue: &mut WorkQueue, key: &PrimaryKey, now: i64) -> u32 {
        if !queue.is_in_flight(key) {
            return 1;
        }
        let failures = queue.fail(key);
        queue.done(
            key,
            Some((at(now, self.backoff.delay(failures)), Cause::Retry)),
        );
        failures
    }
}

/// Queues every cached primary of plugin `name` for a reconcile now, for
/// `cause`.
pub fn queue_all<B: ClusterBackend>(shared: &Shared<B>, name: &str, cause: Cause) {
    let Some(controller) = shared.controllers.get(name) else {
        return;
    };
    let primary = controller.plugin().metadata().primary.clone();
    let now = shared.now();
    // Names from the cache's index: a host starting on a cluster of many
    // primaries does not parse each just to queue it.
    let names = shared
        .cache
        .names(&primary, shared.scope.selectors.for_plugin(name));
    let mut state = controller.state();
    for (namespace, name) in names {
        state
            .queue
            .add(PrimaryKey { namespace, name }, now, cause.clone());
    }
}

/// Queues now every cached primary, of every plugin, that `pick` says yes
/// to; returns how many (distinct per plugin).
pub fn queue_where<B: ClusterBackend>(
    shared: &Shared<B>,
    pick: impl Fn(&PrimaryKey) -> bool,
    cause: Cause,
) -> usize {
    let now = shared.now();
    let mut queued = 0;
    for (name, controller) in shared.controllers.all() {
        let primary = controller.plugin().metadata().primary.clone();
        let names = shared
            .cache
            .names(&primary, shared.scope.selectors.for_plugin(&name));
        let mut state = controller.state();
        for (namespace, name) in names {
            let key = PrimaryKey { namespace, name };
            if pick(&key) {
                state.queue.add(key, now, cause.clone());
                queued += 1;
            }
        }
    }
    queued
}

/// How many cached primaries, over every plugin, `pick` says yes to.
pub fn count_where<B: ClusterBackend>(
    shared: &Shared<B>,
    pick: impl Fn(&PrimaryKey) -> bool,
) -> usize {
    shared
        .controllers
        .all()
        .iter()
        .map(|(name, controller)| {
            let primary = controller.plugin().metadata().primary.clone();
            shared
                .cache
                .names(&primary, shared.scope.selectors.for_plugin(name))
                .into_iter()
                .filter(|(namespace, name)| {
                    pick(&PrimaryKey {
                        namespace: namespace.clone(),
                        name: name.clone(),
                    })
                })
                .count()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PrimaryKey {
        PrimaryKey::new(Some("default"), "web")
    }

    /// A queue with `key` taken for a reconcile at `now`.
    fn in_flight(now: i64) -> WorkQueue {
        let mut queue = WorkQueue::new();
        queue.add(key(), now, Cause::PluginLoaded);
        assert_eq!(queue.pop_ready(now), Some(key()));
        queue
    }

    fn failed() -> Result<Option<Done>, Failure> {
        Err(Failure::new("ReconcileError", "plugin error: not ready"))
    }

    #[test]
    fn a_failure_backs_off_doubling_and_a_success_starts_again_from_nothing() {
        let queues = Queues::default();
        let mut queue = in_flight(0);
        let settled = queues.settle(&mut queue, &key(), failed(), 0);
        assert_eq!(
            settled.outcome,
            Outcome::Failed {
                reason: "ReconcileError".into(),
                message: "plugin error: not ready".into(),
                failures: 1,
                retry_in: Duration::from_secs(1),
            }
        );
        assert_eq!(queue.next_ready_at(), Some(1_000));
        assert_eq!(queue.pop_ready(1_000), Some(key()));
        let again = queues.settle(&mut queue, &key(), failed(), 1_000);
        assert!(
            matches!(again.outcome, Outcome::Failed { failures: 2, retry_in, .. } if retry_in == Duration::from_secs(2)),
            "{:?}",
            again.outcome
        );
        assert_eq!(queue.pop_ready(3_000), Some(key()));
        let done = queues.settle(&mut queue, &key(), Ok(Some(Done::default())), 3_000);
        assert_eq!(
            done.outcome,
            Outcome::Applied {
                changes: vec![],
                requeue_after: None
            }
        );
        assert_eq!(queue.next_ready_at(), None, "no requeue asked for");
        assert_eq!(queue.remembered(), 0, "its failures are forgotten");
    }

    #[test]
    fn a_requeue_below_the_floor_is_rate_limited_and_said_so() {
        let queues = Queues::default();
        let mut queue = in_flight(0);
        let asked = Some(Duration::ZERO);
        let done = Done {
            changes: vec![],
            requeue_after: asked,
        };
        let settled = queues.settle(&mut queue, &key(), Ok(Some(done)), 0);
        assert_eq!(settled.rate_limited, asked);
        assert_eq!(
            settled.outcome,
            Outcome::Applied {
                changes: vec![],
                requeue_after: Some(queues.requeue.floor)
            }
        );
        assert_eq!(queue.next_ready_at(), Some(1_000));
    }

    #[test]
    fn a_primary_gone_is_forgotten_and_a_panic_counts_as_a_failure_once() {
        let queues = Queues::default();
        let mut queue = in_flight(0);
        queue.fail(&key());
        let settled = queues.settle(&mut queue, &key(), Ok(None), 0);
        assert_eq!(settled.outcome, Outcome::Gone);
        assert_eq!(queue.remembered(), 0);

        let mut queue = in_flight(0);
        assert_eq!(queues.settle_panic(&mut queue, &key(), 0), 1);
        assert_eq!(queue.next_ready_at(), Some(1_000));
        assert_eq!(
            queues.settle_panic(&mut queue, &key(), 0),
            1,
            "no longer in flight: its bookkeeping was done"
        );
        assert_eq!(queue.next_ready_at(), Some(1_000));
    }
}
