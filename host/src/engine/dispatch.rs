//! Running an engine's reconciles on the real clock: the loop body shared
//! by `dev` and `run`.
//!
//! The engine decides what is ready; the dispatcher takes watch events in,
//! spawns every ready reconcile as its own task (the engine caps each
//! plugin's concurrency), and collects what they did. Nothing polls: a loop
//! sleeps in [`Dispatcher::wake`] until a watch event arrives, a reconcile
//! finishes, or a delayed reconcile (or a flush of Event counts, or a trim
//! after a run of reconciles) is due.
//! Commands add their own wake-ups (file changes, signals) around it with
//! `select!`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::work_queue::PrimaryKey;
use super::{Engine, ReconcileRecord};
use crate::cluster::{Clock, ClusterBackend, RealClock};
use crate::support::heap_trim::{TrimPacer, release_freed_memory};

/// How often counts of repeated Events that are behind are written (each
/// series at most once per its own refresh interval).
const EVENT_FLUSH: Duration = Duration::from_secs(5);

/// How often a drain asks whether the host still holds its Lease.
pub const LIVE_CHECK: Duration = Duration::from_millis(100);

/// Told of every finished reconcile and how long it took (metrics).
pub type OnFinished = Arc<dyn Fn(&ReconcileRecord, Duration) + Send + Sync>;

pub struct Dispatcher<B: ClusterBackend> {
    engine: Arc<Engine<B>>,
    on_finished: Option<OnFinished>,
    done_tx: mpsc::UnboundedSender<ReconcileRecord>,
    done_rx: mpsc::UnboundedReceiver<ReconcileRecord>,
    /// Reconciles spawned whose record has not been collected.
    outstanding: usize,
    /// Every reconcile task still running (with its shadow, which runs on
    /// after the record is out), so a drain that runs out of time can stop
    /// them and know they stopped.
    tasks: JoinSet<()>,
    last_event_flush: tokio::time::Instant,
    trim: TrimPacer,
}

/// Why [`Dispatcher::wake`] returned.
#[derive(Debug)]
pub enum Wake {
    /// A reconcile finished.
    Finished(Box<ReconcileRecord>),
    /// Watch events arrived, or something became due.
    Work,
}

impl<B: ClusterBackend> Dispatcher<B> {
    pub fn new(engine: Arc<Engine<B>>) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Self {
            engine,
            on_finished: None,
            done_tx,
            done_rx,
            outstanding: 0,
            tasks: JoinSet::new(),
            last_event_flush: tokio::time::Instant::now(),
            trim: TrimPacer::default(),
        }
    }

    /// Calls `hook` with every finished reconcile, in its task.
    pub fn on_finished(mut self, hook: OnFinished) -> Self {
        self.on_finished = Some(hook);
        self
    }

    pub fn engine(&self) -> &Arc<Engine<B>> {
        &self.engine
    }

    /// Takes in the watch events delivered so far and starts every
    /// reconcile that is ready; returns how many events there were.
    pub fn dispatch(&mut self) -> usize {
        let changes = self.engine.pump();
        if self.last_event_flush.elapsed() >= EVENT_FLUSH {
            self.last_event_flush = tokio::time::Instant::now();
            let engine = self.engine.clone();
            tokio::spawn(async move {
                engine.flush_events(false).await;
            });
        }
        while let Some((plugin, key)) = self.engine.next_ready() {
            self.start(plugin, key);
        }
        if self.engine.has_strays() {
            let engine = self.engine.clone();
            tokio::spawn(async move { engine.relabel_strays().await });
        }
        changes
    }

    fn start(&mut self, plugin: String, key: PrimaryKey) {
        let (engine, tx) = (self.engine.clone(), self.done_tx.clone());
        let hook = self.on_finished.clone();
        self.outstanding += 1;
        self.tasks.spawn(async move {
            let started = std::time::Instant::now();
            let (record, shadow) = engine.reconcile_before_shadow(&plugin, key).await;
            if let Some(hook) = hook {
                hook(&record, started.elapsed());
            }
            let _ = tx.send(record);
            // After the record is out: the serving reconcile is done, and
            // its key may be reconciled again while its shadow runs.
            if let Some(job) = shadow {
                engine.shadow(job).await;
            }
        });
    }

    /// Reconciles started and not yet collected.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// A record already finished, without waiting.
    pub fn try_finished(&mut self) -> Option<ReconcileRecord> {
        let record = self.done_rx.try_recv().ok()?;
        self.collected();
        Some(record)
    }

    /// The next record to finish. Cancel-safe, for `select!`; pending for
    /// ever when nothing is outstanding.
    pub async fn finished(&mut self) -> ReconcileRecord {
        if self.outstanding == 0 {
            return std::future::pending().await;
        }
        // The dispatcher holds a sender, so the channel never closes.
        let record = self
            .done_rx
            .recv()
            .await
            .expect("the dispatcher holds a sender");
        self.collected();
        record
    }

    /// Counts a collected record, and tells the trim pacer.
    fn collected(&mut self) {
        self.outstanding -= 1;
        while self.tasks.try_join_next().is_some() {}
        if self.trim.reconcile_finished(std::time::Instant::now()) {
            trim_off_thread();
        }
    }

    /// How long until a delayed reconcile is due, Event counts are to be
    /// flushed or a run of reconciles has ended (to trim after it),
    /// whichever comes first.
    pub fn idle_wait(&self) -> Duration {
        let flush = EVENT_FLUSH.saturating_sub(self.last_event_flush.elapsed());
        let run_end = self
            .trim
            .run_ends_at()
            .map(|end| end.saturating_duration_since(std::time::Instant::now()));
        let now = RealClock.now_millis();
        let due = self
            .engine
            .next_wakeup()
            .map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0)));
        [run_end, due]
            .into_iter()
            .flatten()
            .fold(flush, Duration::min)
            .max(Duration::from_millis(1))
    }

    /// Sleeps until there is something to do: a reconcile finished, a watch
    /// event arrived, or the time of [`Self::idle_wait`] passed.
    /// Cancel-safe, for `select!` beside a command's own wake-ups.
    pub async fn wake(&mut self) -> Wake {
        if self.trim.run_ended(std::time::Instant::now()) {
            trim_off_thread();
        }
        let wait = self.idle_wait();
        let engine = self.engine.clone();
        tokio::select! {
            record = self.finished() => Wake::Finished(Box::new(record)),
            () = engine.watch_events() => Wake::Work,
            () = tokio::time::sleep(wait) => Wake::Work,
        }
    }

    /// Waits, up to `within`, for the reconciles already started to finish;
    /// starts no new ones. Returns the records collected and how many were
    /// still running when time ran out: those are abandoned, aborted at
    /// their next await and waited for, so when this returns none of them
    /// runs or starts a request any more. (A request already sent may still
    /// land: the caller keeps its Lease until that cannot matter.) With
    /// nothing abandoned, shadows still running finish on their own.
    ///
    /// `live` is asked every [`LIVE_CHECK`] while it waits: once it says
    /// no (the Lease this host reconciles under may have lapsed, so another
    /// replica may take these keys), the wait ends there.
    pub async fn drain(
        &mut self,
        within: Duration,
        live: impl Fn() -> bool,
    ) -> (Vec<ReconcileRecord>, usize) {
        let mut records = Vec::new();
        let deadline = tokio::time::Instant::now() + within;
        while self.outstanding > 0 && live() {
            let until = deadline.min(tokio::time::Instant::now() + LIVE_CHECK);
            match tokio::time::timeout_at(until, self.finished()).await {
                Ok(record) => records.push(record),
                Err(_) if until >= deadline => break,
                Err(_) => {}
            }
        }
        let abandoned = self.outstanding;
        if abandoned == 0 {
            self.tasks.detach_all();
            return (records, 0);
        }
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        while let Ok(record) = self.done_rx.try_recv() {
            records.push(record);
        }
        self.outstanding = 0;
        (records, abandoned)
    }
}

/// Hands the memory a run of reconciles freed back to the kernel (see
/// [`crate::support::heap_trim`]), off the dispatcher's thread.
fn trim_off_thread() {
    tokio::task::spawn_blocking(release_freed_memory);
}
