//! Leader election on a coordination.k8s.io Lease: of several replicas of
//! `run`, one reconciles at a time; the others wait as standbys.
//!
//! The locking protocol (server-side apply of `holderIdentity`, renewals,
//! the forced release of an expired holder) is the `kube-lease-manager`
//! crate's. What this module adds is what a controller needs around it:
//!
//! 1. [`acquire`] resolves once this process holds the Lease. While another
//!    replica holds it, it says so once and waits; it reads the Lease every
//!    retry period, so a standby takes over as soon as the holder releases
//!    the Lease or stops renewing it (the crate alone would only look again
//!    when the holder's last renewal expires).
//! 2. While leading, a task renews the Lease every retry period.
//! 3. [`Leadership::lost`] resolves when another holder took the Lease, the
//!    Lease was deleted, or no renewal succeeded within the renew deadline.
//!    The caller then stops at once and exits non-zero, so that Kubernetes
//!    restarts it as a standby (as controller-runtime does).
//! 4. On a graceful shutdown, [`Leadership::release`] clears the holder, so
//!    a standby takes over within a retry period instead of a lease duration.
//!
//! Guarantees: leadership is given up (`lost` resolves, and
//! [`Leadership::check`] fails even if the renewal task is stuck) once the
//! renew deadline has passed since our last successful write to the Lease,
//! which is before a standby may take it over (the lease duration after that
//! write). A hung API server is covered too: the deadline does not wait for
//! the renewal request to fail.
//!
//! No two clocks are compared: a standby judges the holder's Lease by when
//! it saw its `renewTime` change, by its own clock
//! ([`Sightings`](crate::sharding::lease_sightings::Sightings)), and lets
//! the crate contend only once the Lease is free or was seen unrenewed for
//! its duration. (The crate then also judges by the stamp: a holder whose
//! clock ran ahead is taken over late, never early.)
//!
//! Caveats, from the crate: renewals and releases are merge patches without
//! a resourceVersion precondition, and a standby clears an expired holder
//! before it applies itself. Two standbys that find the same expired holder
//! at the same moment can therefore both believe they lead until the next
//! renewal (a retry period later), when one of them sees the other and
//! steps down.
//!
//! Errors: missing RBAC (401/403) or a namespace that does not exist fail
//! [`acquire`]; every other API error is logged and retried every retry
//! period, while waiting and while leading (up to the renew deadline).

use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::sharding::lease_sightings::Sightings;

/// The Lease's name unless `--leader-election-id` says otherwise.
pub const DEFAULT_LEASE_NAME: &str = "reconciler-host";

/// Where a pod finds the namespace of its service account.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// How long a release on shutdown may take before the Lease is left to expire.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which Lease, who we are, and the timing of the election.
///
/// The defaults are controller-runtime's: lease duration 15 s, renew
/// deadline 10 s, retry period 2 s. They map onto the crate's parameters so:
/// - `lease_duration` is its `duration`, written as `leaseDurationSeconds`:
///   how long after the holder's last renewal a standby may take over.
/// - `retry_period` becomes its `grace` (`lease_duration - retry_period`):
///   the crate renews `grace` before the Lease would expire, which is one
///   retry period after the previous renewal. It is also how often a
///   standby reads the Lease and how long a failed request waits before it
///   is tried again.
/// - `renew_deadline` has no counterpart in the crate; [`Leadership`]
///   enforces it from the time of our last successful write to the Lease.
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    pub namespace: String,
    pub lease_name: String,
    /// Unique among every process that contends for the Lease, including
    /// two processes of one pod: see [`unique_identity`].
    pub identity: String,
    /// Whole seconds (a Lease counts in seconds).
    pub lease_duration: Duration,
    /// Less than `lease_duration`: the gap is the tolerated clock skew.
    pub renew_deadline: Duration,
    /// Whole seconds, less than `renew_deadline`.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// A Lease `namespace/lease_name` with a fresh [`unique_identity`] and
    /// controller-runtime's timing.
    pub fn new(namespace: impl Into<String>, lease_name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            lease_name: lease_name.into(),
            identity: unique_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// `namespace/name`, as logs and errors name the Lease.
    pub fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.lease_name)
    }

    fn validate(&self) -> Result<(), LeaderElectionError> {
        let settings = |message: String| Err(LeaderElectionError::Settings(message));
        if self.namespace.is_empty() || self.lease_name.is_empty() || self.identity.is_empty() {
            return settings(format!(
                "the Lease needs a namespace, a name and an identity (got {:?})",
                self
            ));
        }
        if self.lease_duration.subsec_nanos() != 0 || self.retry_period.subsec_nanos() != 0 {
            return settings(
                "the lease duration and the retry period are whole seconds (a Lease counts in seconds)"
                    .to_string(),
            );
        }
        if self.retry_period.is_zero()
            || self.retry_period >= self.renew_deadline
            || self.renew_deadline >= self.lease_duration
        {
            return settings(format!(
                "need 0 < retry period ({:?}) < renew deadline ({:?}) < lease duration ({:?})",
                self.retry_period, self.renew_deadline, self.lease_duration
            ));
        }
        Ok(())
    }

    fn params(&self) -> LeaseParams {
        let duration = self.lease_duration.as_secs();
        LeaseParams::new(
            self.identity.clone(),
            duration,
            duration - self.retry_period.as_secs(),
        )
    }
}

/// Why [`acquire`] or [`Leadership::release`] failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    #[error("invalid leader election settings: {0}")]
    Settings(String),
    /// Retrying cannot help: the operator has to fix RBAC or the namespace.
    #[error("cannot use lease {lease}: {hint}")]
    Refused {
        lease: String,
        hint: String,
        #[source]
        source: LeaseManagerError,
    },
    #[error("cannot release lease {lease}; a standby takes over once it expires")]
    Release {
        lease: String,
        #[source]
        source: LeaseManagerError,
    },
    #[error(
        "releasing lease {lease} took longer than {}s; a standby takes over once it expires",
        RELEASE_TIMEOUT.as_secs()
    )]
    ReleaseTimedOut { lease: String },
}

/// Why leadership ended while the caller was leading.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeadershipLost {
    #[error("lease {lease} is held by {holder} now")]
    TakenOver { lease: String, holder: String },
    #[error("lease {lease} was deleted")]
    Deleted { lease: String },
    #[error(
        "lease {lease} was not renewed within the renew deadline of {}s{}",
        renew_deadline.as_secs(),
        last_error.as_deref().map(|e| format!(" (last error: {e})")).unwrap_or_default()
    )]
    NotRenewed {
        lease: String,
        renew_deadline: Duration,
        last_error: Option<String>,
    },
    #[error("the renewal of lease {lease} stopped unexpectedly")]
    RenewalStopped { lease: String },
}

/// The namespace of the Lease when `--leader-election-namespace` is not
/// given: `POD_NAMESPACE` (set from the downward API), else the service
/// account's namespace (in a pod), else `default` (on a laptop).
pub fn default_namespace() -> String {
    namespace_from(
        std::env::var("POD_NAMESPACE").ok(),
        std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE).ok(),
    )
}

fn namespace_from(pod_namespace: Option<String>, service_account: Option<String>) -> String {
    [pod_namespace, service_account]
        .into_iter()
        .flatten()
        .map(|ns| ns.trim().to_string())
        .find(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// `POD_NAME` (else `HOSTNAME`) and a random suffix: the name tells an
/// operator which pod leads, the suffix keeps two processes of one pod or
/// host (a restarted container, two shells on a laptop) from sharing an
/// identity, which would let both believe they hold the Lease.
pub fn unique_identity() -> String {
    let name = ["POD_NAME", "HOSTNAME"]
        .into_iter()
        .filter_map(|var| std::env::var(var).ok())
        .find(|name| !name.trim().is_empty());
    identity_for(name.as_deref(), random_suffix())
}

fn identity_for(name: Option<&str>, suffix: u64) -> String {
    let name = name.map(str::trim).unwrap_or("reconciler-host");
    // Short enough for the crate's field manager (`kube-lease-manager-` and
    // the identity), which the API server limits to 128 characters.
    let name: String = name.chars().take(63).collect();
    format!("{name}_{:012x}", suffix & 0xffff_ffff_ffff)
}

fn random_suffix() -> u64 {
    // RandomState is seeded from the OS per process; the pid and the time
    // only add to it.
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
}

/// Resolves once this process holds the Lease, creating the Lease if it
/// does not exist. Waits as long as another replica holds it; fails only
/// on errors retrying cannot fix (see the module doc).
pub async fn acquire(
    client: kube::Client,
    config: LeaderElectionConfig,
) -> Result<Leadership, LeaderElectionError> {
    config.validate()?;
    let lease = config.lease();
    let renewals = Renewals::default();
    let client = tracking_client(client, &config, renewals.clone());
    let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    tracing::debug!("contending for lease {lease} as {}", config.identity);
    let mut seen_holder = None;
    let mut sightings = Sightings::default();
    let manager = loop {
        until_free(&api, &config, &mut seen_holder, &mut sightings).await;
        let attempt = async {
            // A fresh manager reads the Lease anew; one that waited keeps
            // the expiry it saw and would not notice a release.
            let manager = LeaseManager::new(
                client.clone(),
                &config.lease_name,
                &config.namespace,
                config.params(),
                LeaseCreateMode::AutoCreate,
            )
            .await?;
            let led = contend(&manager, &config).await?;
            Ok::<_, LeaseManagerError>(led.then_some(manager))
        };
        match attempt.await {
            Ok(Some(manager)) => break manager,
            Ok(None) => {}
            Err(source) => {
                if let Some(hint) = refusal_hint(&source, &config) {
                    return Err(LeaderElectionError::Refused {
                        lease,
                        hint,
                        source,
                    });
                }
                tracing::warn!(
                    "contending for lease {lease} failed: {source}; trying again in {}s",
                    config.retry_period.as_secs()
                );
                tokio::time::sleep(config.retry_period).await;
            }
        }
    };
    tracing::info!(
        "leading: lease {lease} is held by this process ({})",
        config.identity
    );
    Ok(Leadership::start(manager, api, &config, renewals))
}

/// `Ok(true)` once we lead; `Ok(false)` when the crate did not take the
/// Lease within a retry period (it judges the holder live by its stamp, or
/// waits out an expiry it saw earlier): the caller looks again.
async fn contend(
    manager: &LeaseManager,
    config: &LeaderElectionConfig,
) -> Result<bool, LeaseManagerError> {
    let led = async {
        // `changed` reports changes of our state; before we lead the only
        // change is to leading.
        while !manager.changed().await? {}
        Ok(true)
    };
    tokio::select! {
        led = led => led,
        () = tokio::time::sleep(config.retry_period) => Ok(false),
    }
}

/// Resolves once a read of the Lease (one every retry period) finds it
/// free to take: absent, with no holder, or not seen renewed for its
/// duration by our clock. Logs the holder whenever it differs from the
/// last one logged.
async fn until_free(
    api: &Api<Lease>,
    config: &LeaderElectionConfig,
    seen: &mut Option<String>,
    sightings: &mut Sightings,
) {
    let lease_name = config.lease();
    let mut first = true;
    loop {
        if !first {
            tokio::time::sleep(config.retry_period).await;
        }
        first = false;
        let lease = match api.get_opt(&config.lease_name).await {
            Ok(lease) => lease,
            // Refused (RBAC, no namespace): the manager's first request
            // meets the same answer and says what to fix.
            Err(kube::Error::Api(e)) if matches!(e.code, 401 | 403 | 404) => return,
            // Others pass: read again, without contending meanwhile.
            Err(e) => {
                tracing::debug!("reading lease {lease_name} failed: {e}");
                continue;
            }
        };
        let holder = lease.as_ref().map_or(Holder::Free, |lease| {
            holder_of(lease, sightings, Instant::now())
        });
        match holder {
            Holder::Free => return,
            Holder::Live(holder) if holder == config.identity => return,
            Holder::Live(holder) => {
                if seen.as_deref() != Some(holder.as_str()) {
                    tracing::info!("waiting for leadership of lease {lease_name} held by {holder}");
                    *seen = Some(holder);
                }
            }
            Holder::Expired(holder) => {
                tracing::info!(
                    "lease {lease_name} held by {holder} was not seen renewed in its duration: taking it over"
                );
                *seen = Some(holder);
                return;
            }
        }
    }
}

/// What a Lease says about its holder, as seen by us.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    Free,
    Live(String),
    /// Held, but not seen renewed for its duration (or without a
    /// `renewTime` or duration, which the crate treats the same way).
    Expired(String),
}

fn holder_of(lease: &Lease, sightings: &mut Sightings, now: Instant) -> Holder {
    let Some(spec) = &lease.spec else {
        return Holder::Free;
    };
    let Some(holder) = spec.holder_identity.as_deref().filter(|h| !h.is_empty()) else {
        return Holder::Free;
    };
    let name = lease.metadata.name.as_deref().unwrap_or_default();
    let expires = match (&spec.renew_time, spec.lease_duration_seconds) {
        (Some(renewed), Some(seconds)) => {
            let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
            sightings.expires(name, &renewed.0.to_string(), duration, now)
        }
        _ => now,
    };
    match expires > now {
        true => Holder::Live(holder.to_string()),
        false => Holder::Expired(holder.to_string()),
    }
}

/// The operator's next step for errors that retrying cannot fix.
fn refusal_hint(error: &LeaseManagerError, config: &LeaderElectionConfig) -> Option<String> {
    let LeaseManagerError::KubeError(kube::Error::Api(status)) = error else {
        return None;
    };
    let ns = &config.namespace;
    match status.code {
        401 | 403 => Some(format!(
            "the credentials may not get, create and patch coordination.k8s.io leases in namespace {ns} (deploy/cluster-role.yaml grants them)"
        )),
        404 if status
            .details
            .as_ref()
            .is_some_and(|d| d.kind == "namespaces") =>
        {
            Some(format!(
                "namespace {ns} does not exist (choose one with --leader-election-namespace)"
            ))
        }
        _ => None,
    }
}

/// What the renew deadline counts from: when our last write to the Lease
/// succeeded (the time it was sent, which is no earlier than the
/// `renewTime` it carried), and the last renewal error, for the message.
/// The crate does not report its renewals; the client records them.
#[derive(Clone, Debug, Default)]
struct Renewals(Arc<Mutex<RenewalLog>>);

#[derive(Debug, Default)]
struct RenewalLog {
    last_write: Option<Instant>,
    last_error: Option<(Instant, String)>,
}

impl Renewals {
    fn log(&self) -> std::sync::MutexGuard<'_, RenewalLog> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record_write(&self, sent: Instant) {
        let mut log = self.log();
        log.last_write = Some(log.last_write.map_or(sent, |last| last.max(sent)));
    }

    fn record_error(&self, error: String) {
        self.log().last_error = Some((Instant::now(), error));
    }

    fn last_write(&self) -> Option<Instant> {
        self.log().last_write
    }

    fn deadline(&self, renew_deadline: Duration) -> Instant {
        self.last_write().unwrap_or_else(Instant::now) + renew_deadline
    }

    fn not_renewed(&self, lease: &str, renew_deadline: Duration) -> LeadershipLost {
        let log = self.log();
        // An error older than the last successful write is not why the
        // renewals stopped.
        let last_error = log
            .last_error
            .as_ref()
            .filter(|(at, _)| log.last_write.is_none_or(|write| *at >= write))
            .map(|(_, error)| error.clone());
        LeadershipLost::NotRenewed {
            lease: lease.to_string(),
            renew_deadline,
            last_error,
        }
    }
}

/// `client`, with every successful PATCH of our Lease recorded in `renewals`.
fn tracking_client(
    client: kube::Client,
    config: &LeaderElectionConfig,
    renewals: Renewals,
) -> kube::Client {
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
        config.namespace, config.lease_name
    );
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let client = client.clone();
        let renewals = renewals.clone();
        let is_write = request.method() == http::Method::PATCH && request.uri().path() == path;
        async move {
            let sent = Instant::now();
            let response = client.send(request).await?;
            if is_write && response.status().is_success() {
                renewals.record_write(sent);
            }
            Ok::<_, kube::Error>(response)
        }
    });
    kube::Client::new(service, namespace)
}

/// This process holds the Lease. Dropping it stops the renewals without
/// releasing the Lease (a standby takes over once it expires); call
/// [`release`](Leadership::release) on a graceful shutdown instead.
pub struct Leadership {
    lease: String,
    identity: String,
    renew_deadline: Duration,
    manager: Arc<LeaseManager>,
    renewals: Renewals,
    lost_rx: watch::Receiver<Option<LeadershipLost>>,
    renewal: Option<JoinHandle<()>>,
}

impl Leadership {
    fn start(
        manager: LeaseManager,
        api: Api<Lease>,
        config: &LeaderElectionConfig,
        renewals: Renewals,
    ) -> Self {
        // Acquiring wrote the Lease; should that ever not be seen, count
        // from now, when the crate has just read us as the holder.
        if renewals.last_write().is_none() {
            renewals.record_write(Instant::now());
        }
        let manager = Arc::new(manager);
        let (lost_tx, lost_rx) = watch::channel(None);
        let renewal = tokio::spawn(keep_renewing(
            manager.clone(),
            api,
            config.clone(),
            renewals.clone(),
            lost_tx,
        ));
        Self {
            lease: config.lease(),
            identity: config.identity.clone(),
            renew_deadline: config.renew_deadline,
            manager,
            renewals,
            lost_rx,
            renewal: Some(renewal),
        }
    }

    /// `namespace/name` of the Lease.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// The identity written as the Lease's holder.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// `Err` once leadership is lost. Checks the renew deadline itself, so
    /// it holds even when the renewal task has not run for a while: call it
    /// before starting work that writes to the cluster.
    pub fn check(&self) -> Result<(), LeadershipLost> {
        if let Some(lost) = self.lost_rx.borrow().clone() {
            return Err(lost);
        }
        if Instant::now() >= self.deadline() {
            return Err(self.renewals.not_renewed(&self.lease, self.renew_deadline));
        }
        Ok(())
    }

    /// Resolves when leadership is lost (see [`LeadershipLost`]); pending
    /// while this process leads. Cancel-safe, for `select!` loops.
    pub async fn lost(&mut self) -> LeadershipLost {
        loop {
            if let Err(lost) = self.check() {
                return lost;
            }
            let deadline = self.deadline();
            tokio::select! {
                changed = self.lost_rx.changed() => {
                    if changed.is_err() {
                        // The task ends only after saying why; it panicked.
                        return self.lost_rx.borrow().clone().unwrap_or_else(|| {
                            LeadershipLost::RenewalStopped { lease: self.lease.clone() }
                        });
                    }
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Stops renewing and clears the Lease's holder, so a standby takes
    /// over at once. Does nothing if leadership was already lost: the
    /// Lease may be someone else's by now.
    pub async fn release(mut self) -> Result<(), LeaderElectionError> {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
            let _ = renewal.await;
        }
        if let Err(lost) = self.check() {
            tracing::info!("not releasing: {lost}");
            return Ok(());
        }
        let lease = self.lease.clone();
        match tokio::time::timeout(RELEASE_TIMEOUT, self.manager.release()).await {
            Ok(Ok(())) => {
                tracing::info!("released lease {lease} ({})", self.identity);
                Ok(())
            }
            Ok(Err(source)) => Err(LeaderElectionError::Release { lease, source }),
            Err(_) => Err(LeaderElectionError::ReleaseTimedOut { lease }),
        }
    }

    fn deadline(&self) -> Instant {
        self.renewals.deadline(self.renew_deadline)
    }

    /// A check that can be handed to tasks of their own (each member
    /// cluster's dispatcher): whether this process still leads, as
    /// [`Self::check`] says, without holding the Leadership.
    pub fn gate(&self) -> LeadershipGate {
        LeadershipGate {
            lost_rx: self.lost_rx.clone(),
            renewals: self.renewals.clone(),
            renew_deadline: self.renew_deadline,
        }
    }
}

/// See [`Leadership::gate`].
#[derive(Clone)]
pub struct LeadershipGate {
    lost_rx: watch::Receiver<Option<LeadershipLost>>,
    renewals: Renewals,
    renew_deadline: Duration,
}

impl LeadershipGate {
    /// Whether a reconcile may start now.
    pub fn holds(&self) -> bool {
        self.held_until()
            .is_some_and(|until| Instant::now() < until)
    }

    /// Until when this process leads unless it renews before: the renew
    /// deadline after its last write to the Lease; `None` once it lost it.
    pub fn held_until(&self) -> Option<Instant> {
        self.lost_rx
            .borrow()
            .is_none()
            .then(|| self.renewals.deadline(self.renew_deadline))
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
    }
}

/// Keeps the crate renewing until leadership is lost, then says why in
/// `lost_tx`. A renewal that fails is tried again every retry period; one
/// that hangs is abandoned at the renew deadline.
async fn keep_renewing(
    manager: Arc<LeaseManager>,
    api: Api<Lease>,
    config: LeaderElectionConfig,
    renewals: Renewals,
    lost_tx: watch::Sender<Option<LeadershipLost>>,
) {
    let lease = config.lease();
    let lost = 'renewing: loop {
        let changed = manager.changed();
        tokio::pin!(changed);
        let result = loop {
            let due = renewals.deadline(config.renew_deadline);
            tokio::select! {
                result = &mut changed => break result,
                () = tokio::time::sleep_until(due) => {
                    if renewals.deadline(config.renew_deadline) <= Instant::now() {
                        break 'renewing renewals.not_renewed(&lease, config.renew_deadline);
                    }
                }
            }
        };
        match result {
            // Only a change is reported, and we already lead.
            Ok(true) => {}
            Ok(false) => {
                let holder = current_holder(&api, &config).await;
                break LeadershipLost::TakenOver {
                    lease: lease.clone(),
                    holder,
                };
            }
            Err(e) if is_deleted(&e) => {
                break LeadershipLost::Deleted {
                    lease: lease.clone(),
                };
            }
            Err(e) => {
                tracing::warn!(
                    "renewing lease {lease} failed: {e}; trying again in {}s (leadership ends {}s after the last renewal)",
                    config.retry_period.as_secs(),
                    config.renew_deadline.as_secs()
                );
                renewals.record_error(e.to_string());
                let retry = Instant::now() + config.retry_period;
                tokio::time::sleep_until(retry.min(renewals.deadline(config.renew_deadline))).await;
            }
        }
    };
    tracing::debug!("renewals of lease {lease} stopped: {lost}");
    lost_tx.send_replace(Some(lost));
}

fn is_deleted(error: &LeaseManagerError) -> bool {
    match error {
        LeaseManagerError::NonexistentLease(_) => true,
        LeaseManagerError::KubeError(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}

/// Who holds the Lease now, for the message that says we lost it.
async fn current_holder(api: &Api<Lease>, config: &LeaderElectionConfig) -> String {
    let read = tokio::time::timeout(config.retry_period, api.get_opt(&config.lease_name)).await;
    read.ok()
        .and_then(Result::ok)
        .flatten()
        .and_then(|lease| lease.spec?.holder_identity)
        .filter(|holder| !holder.is_empty())
        .unwrap_or_else(|| "another process".to_string())
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
