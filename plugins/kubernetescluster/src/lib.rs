//! Annotation-driven cluster operations, as a plugin.
//!
//! A KubernetesCluster describes a cluster (masters, workers, version); the
//! annotation `app.kubernetes.io/operation` says what to do with it:
//! `creating`, `scaling` or `upgrading`. Each operation runs as one owned
//! Job, next to an owned ConfigMap that records it (operation, start time,
//! Job name, and the spec the Job works from). Both are named
//! `<cluster>-<operation>-<generation>`, so asking again for the same thing
//! finds the same pair, and a spec change under the same annotation is a new
//! operation.
//!
//! One operation runs at a time, to its end: success moves `status.phase` to
//! Running; a failed Job, or one still running past `spec.timeoutSeconds`,
//! moves it to Failed with a Ready condition saying why. The finished
//! operation is recorded in `status.lastJob`, so the same annotation never
//! starts a second Job for it. The children returned are the pair in flight,
//! or else the last finished pair for as long as it exists (so its logs stay
//! readable); a finished Job is never created again.
//!
//! Deletion is `kubectl delete`: the finalizer `example.com/cluster-cleanup`
//! holds the object while a cleanup Job (operation `deleting`, phase
//! Terminating) tears the cluster down, and is released once it succeeded.
//! The annotation value `deleting` only announces that; a plugin cannot
//! delete its own primary.
//!
//! `spec.masters` is fixed by the first operation: it is remembered in
//! `status.masters`, and a later change is refused (condition Accepted=False,
//! reason MastersImmutable) without starting any Job.
//!
//! The plugin also serves admission (see `admission.rs`): an update that
//! changes `spec.masters` is denied before it is stored, and an empty
//! `spec.version` is defaulted. The reconcile-time refusal stays as defence
//! in depth, for objects stored while no webhook was registered.

mod admission;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use reconciler_sdk::object::PartialMeta;
use reconciler_sdk::{
    Admission, AdmissionSettings, Change, Context, Error, EventType, FailurePolicy, KindRef,
    Object, PluginMetadata, Reconciler, Response, Verdict,
};

pub use admission::DEFAULT_VERSION;
use serde::{Deserialize, Serialize};

/// The annotation that names the operation to run.
pub const OPERATION_ANNOTATION: &str = "app.kubernetes.io/operation";
/// Holds a deleted KubernetesCluster until its cleanup Job succeeded.
pub const FINALIZER: &str = "example.com/cluster-cleanup";
/// Labels on every Job and ConfigMap: which cluster, which operation.
pub const CLUSTER_LABEL: &str = "example.com/cluster";
pub const OPERATION_LABEL: &str = "example.com/operation";
/// What the operation Jobs run. A stand-in for real provisioning work.
pub const JOB_IMAGE: &str = "busybox:1.36";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesClusterSpec {
    /// Control-plane nodes. Fixed once the first operation started.
    pub masters: i32,
    #[serde(default)]
    pub workers: i32,
    /// The Kubernetes version to run, e.g. `1.33`.
    #[serde(default)]
    pub version: String,
    /// How long one operation's Job may run before it counts as failed.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: i64,
}

fn default_timeout_seconds() -> i64 {
    600
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesClusterStatus {
    #[serde(default)]
    pub phase: Phase,
    /// `spec.masters` as the first operation found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masters: Option<i32>,
    /// The operation in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningOperation>,
    /// The last operation that finished, successfully or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<Operation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningOperation {
    pub operation: Operation,
    pub job: String,
    pub started_at: Timestamp,
}

pub type KubernetesCluster = Object<KubernetesClusterSpec, KubernetesClusterStatus>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Creating,
    Scaling,
    Upgrading,
    Deleting,
}

impl Operation {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "creating" => Some(Self::Creating),
            "scaling" => Some(Self::Scaling),
            "upgrading" => Some(Self::Upgrading),
            "deleting" => Some(Self::Deleting),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "creating",
            Self::Scaling => "scaling",
            Self::Upgrading => "upgrading",
            Self::Deleting => "deleting",
        }
    }

    /// The phase while this operation runs.
    pub fn phase(self) -> Phase {
        match self {
            Self::Creating => Phase::Creating,
            Self::Scaling => Phase::Scaling,
            Self::Upgrading => Phase::Upgrading,
            Self::Deleting => Phase::Terminating,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Nothing has run yet.
    #[default]
    #[serde(rename = "")]
    Pending,
    Creating,
    Running,
    Scaling,
    Upgrading,
    Failed,
    Terminating,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "",
            Self::Creating => "Creating",
            Self::Running => "Running",
            Self::Scaling => "Scaling",
            Self::Upgrading => "Upgrading",
            Self::Failed => "Failed",
            Self::Terminating => "Terminating",
        }
    }
}

/// `<cluster>-<operation>-<generation>`: the same request always names the
/// same Job, and a spec change (a new generation) names a new one.
pub fn job_name(cluster: &KubernetesCluster, operation: Operation) -> String {
    let generation = cluster.metadata.generation.unwrap_or(0);
    format!("{}-{operation}-{generation}", cluster.name())
}

pub struct KubernetesClusters;

impl Reconciler for KubernetesClusters {
    type Primary = KubernetesCluster;

    fn metadata() -> PluginMetadata {
        PluginMetadata::new(
            "kubernetescluster",
            env!("CARGO_PKG_VERSION"),
            KindRef::new("example.com", "v1alpha1", "KubernetesCluster"),
        )
        .owns(KindRef::of::<ConfigMap>())
        .owns(KindRef::of::<Job>())
        .finalizer(FINALIZER)
        // What the decision reads. The cluster's spec and its operation
        // annotation (its own status writes change neither); the records'
        // data; the Jobs' outcome and start, not every count of active or
        // ready pods the Job controller writes while one runs.
        .wake_on(
            KindRef::new("example.com", "v1alpha1", "KubernetesCluster"),
            [Change::Generation, Change::Annotations],
        )
        .wake_on(
            KindRef::of::<ConfigMap>(),
            [Change::Fields(vec!["data".into()])],
        )
        .wake_on(
            KindRef::of::<Job>(),
            [Change::Fields(
                [
                    "status.succeeded",
                    "status.failed",
                    "status.conditions",
                    "status.startTime",
                    "status.completionTime",
                ]
                .map(String::from)
                .to_vec(),
            )],
        )
    }

    fn reconcile(cluster: KubernetesCluster, ctx: &Context) -> Result<Response, Error> {
        let timeout = cluster.spec.timeout_seconds;
        if timeout < 1 {
            return Err(Error::msg(format!(
                "spec.timeoutSeconds must be 1 or more, got {timeout}"
            )));
        }
        let observed = Observed {
            jobs: ctx.children_of_kind(&KindRef::of::<Job>())?,
            records: ctx.children_of_kind(&KindRef::of::<ConfigMap>())?,
        };
        let mut plan = Plan::new(&cluster, &observed, ctx.now());
        if ctx.deleting() {
            if !plan.anything_started() {
                // Nothing was ever created, so there is nothing to clean up.
                return Ok(Response::new().finalized());
            }
            plan.clean_up();
        } else {
            plan.operate();
        }
        plan.into_response()
    }

    /// Creates and updates, defaulted and validated; a failed check denies
    /// (the masters rule protects a running cluster).
    fn admission() -> Option<AdmissionSettings> {
        Some(
            AdmissionSettings::validating()
                .mutating()
                .failure_policy(FailurePolicy::Fail),
        )
    }

    fn validate(request: &Admission<KubernetesCluster>) -> Result<Verdict, Error> {
        admission::validate(request)
    }

    fn apply_defaults(
        object: &mut serde_json::Value,
        _request: &Admission<KubernetesCluster>,
    ) -> Result<(), Error> {
        admission::apply_defaults(object)
    }
}

reconciler_sdk::export_plugin!(KubernetesClusters);

/// The parts of an observed Job this plugin looks at.
#[derive(Deserialize)]
struct ObservedJob {
    metadata: PartialMeta,
    #[serde(default)]
    status: JobProgress,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobProgress {
    #[serde(default)]
    succeeded: i32,
    #[serde(default)]
    failed: i32,
    start_time: Option<Timestamp>,
    completion_time: Option<Timestamp>,
    #[serde(default)]
    conditions: Vec<JobCondition>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    message: String,
    last_transition_time: Option<Timestamp>,
}

impl JobProgress {
    fn condition(&self, type_: &str) -> Option<&JobCondition> {
        self.conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    }

    fn succeeded(&self) -> bool {
        self.succeeded >= 1 || self.condition("Complete").is_some()
    }

    /// Our Jobs have a backoffLimit of 0, so one failed pod fails the Job.
    fn failed(&self) -> bool {
        self.failed >= 1 || self.condition("Failed").is_some()
    }
}

/// An observed operation record: only its name and data matter.
#[derive(Deserialize)]
struct ObservedRecord {
    metadata: PartialMeta,
    #[serde(default)]
    data: BTreeMap<String, String>,
}

struct Observed {
    jobs: Vec<ObservedJob>,
    records: Vec<ObservedRecord>,
}

impl Observed {
    fn job(&self, name: &str) -> Option<&ObservedJob> {
        self.jobs.iter().find(|j| j.metadata.name == name)
    }

    fn record(&self, name: &str) -> Option<&ObservedRecord> {
        self.records.iter().find(|r| r.metadata.name == name)
    }
}

/// Where one operation's Job stands.
enum Progress {
    Running {
        deadline: Timestamp,
    },
    Succeeded {
        at: Timestamp,
    },
    Failed {
        reason: &'static str,
        message: String,
        at: Timestamp,
    },
}

/// The response being built, and the status it ends with.
struct Plan<'a> {
    cluster: &'a KubernetesCluster,
    observed: &'a Observed,
    now: Timestamp,
    status: KubernetesClusterStatus,
    /// Operation records (ConfigMap) and Jobs to keep or create.
    records: Vec<ConfigMap>,
    jobs: Vec<Job>,
    events: Vec<(EventType, &'static str, String)>,
    requeue: Option<Duration>,
    finalized: bool,
}

impl<'a> Plan<'a> {
    fn new(cluster: &'a KubernetesCluster, observed: &'a Observed, now: Timestamp) -> Self {
        Self {
            cluster,
            observed,
            now,
            status: cluster.status.clone().unwrap_or_default(),
            records: Vec::new(),
            jobs: Vec::new(),
            events: Vec::new(),
            requeue: None,
            finalized: false,
        }
    }

    fn anything_started(&self) -> bool {
        self.status.masters.is_some()
            || self.status.running.is_some()
            || !self.observed.jobs.is_empty()
    }

    /// Not deleting: follow the operation in flight, then start the one the
    /// annotation asks for if it has not run yet.
    fn operate(&mut self) {
        let wanted = self.wanted_operation();
        if self.follow_running() {
            return; // one operation at a time
        }
        if let Some(operation) = wanted
            && self.status.last_job.as_deref() != Some(&job_name(self.cluster, operation))
        {
            self.start(operation);
            return;
        }
        self.keep_last();
    }

    /// Deleting: the cleanup Job replaces whatever was running, and the
    /// finalizer goes once it succeeded.
    fn clean_up(&mut self) {
        if self
            .status
            .running
            .as_ref()
            .is_some_and(|r| r.operation != Operation::Deleting)
        {
            // Abandoned: not returning its Job prunes it.
            self.status.running = None;
        }
        if self.follow_running() {
            return;
        }
        if self.status.last_operation == Some(Operation::Deleting)
            && self.status.phase == Phase::Terminating
        {
            self.finalized = true;
        } else if self.status.last_job.as_deref()
            != Some(&job_name(self.cluster, Operation::Deleting))
        {
            self.start(Operation::Deleting);
            return;
        }
        // Otherwise the cleanup failed at this generation: it stays failed
        // until the spec is edited (a retry) or someone removes the finalizer.
        self.keep_last();
    }

    /// The operation the annotation asks for, if it may run; records the
    /// verdict in the Accepted condition.
    fn wanted_operation(&mut self) -> Option<Operation> {
        let spec_masters = self.cluster.spec.masters;
        if let Some(masters) = self.status.masters
            && masters != spec_masters
        {
            self.refuse(
                "MastersImmutable",
                format!(
                    "spec.masters cannot change after creation: it was {masters}, now {spec_masters}; \
                     set it back to {masters} to run operations again"
                ),
            );
            return None;
        }
        let annotations = self.cluster.metadata.annotations.as_ref();
        let Some(value) = annotations.and_then(|a| a.get(OPERATION_ANNOTATION)) else {
            self.accept("no operation requested".into());
            return None;
        };
        match Operation::parse(value) {
            None => {
                self.refuse(
                    "UnknownOperation",
                    format!(
                        "{OPERATION_ANNOTATION} is {value:?}: use creating, scaling, upgrading or deleting"
                    ),
                );
                None
            }
            Some(Operation::Deleting) => {
                self.accept("the cleanup runs when the KubernetesCluster is deleted".into());
                None
            }
            Some(operation) => {
                self.accept(format!("{operation} requested"));
                Some(operation)
            }
        }
    }

    fn accept(&mut self, message: String) {
        self.set_condition("Accepted", true, "Accepted", message);
    }

    fn refuse(&mut self, reason: &'static str, message: String) {
        if self.set_condition("Accepted", false, reason, message.clone()) {
            self.events.push((EventType::Warning, reason, message));
        }
    }

    /// Starts `operation` (or picks it up again if its Job already exists).
    fn start(&mut self, operation: Operation) {
        let job = job_name(self.cluster, operation);
        // A record already written keeps its start time.
        let started_at = self
            .observed
            .record(&job)
            .and_then(|r| r.data.get("startedAt"))
            .and_then(|t| t.parse().ok())
            .unwrap_or(self.now);
        if self.observed.job(&job).is_none() {
            self.events.push((
                EventType::Normal,
                "OperationStarted",
                format!("{operation}: Job {job}"),
            ));
        }
        self.status.masters.get_or_insert(self.cluster.spec.masters);
        self.status.running = Some(RunningOperation {
            operation,
            job,
            started_at,
        });
        self.follow_running();
    }

    /// Follows the operation in flight; true while it is still running.
    fn follow_running(&mut self) -> bool {
        let Some(running) = self.status.running.clone() else {
            return false;
        };
        match self.progress(&running) {
            Progress::Running { deadline } => {
                self.keep(running.operation, &running.job, running.started_at);
                self.status.phase = running.operation.phase();
                self.set_condition(
                    "Ready",
                    false,
                    running.operation.phase().as_str(),
                    format!("{}: Job {} is running", running.operation, running.job),
                );
                let wait = deadline.as_millisecond() - self.now.as_millisecond();
                self.requeue = Some(Duration::from_millis(wait.max(0) as u64));
                true
            }
            Progress::Succeeded { at } => {
                let phase = match running.operation {
                    Operation::Deleting => Phase::Terminating,
                    _ => Phase::Running,
                };
                let message = format!("{}: Job {} succeeded", running.operation, running.job);
                self.set_condition(
                    "Ready",
                    phase == Phase::Running,
                    phase.as_str(),
                    message.clone(),
                );
                self.events
                    .push((EventType::Normal, "OperationSucceeded", message));
                self.finish(running, phase, at);
                false
            }
            Progress::Failed {
                reason,
                mut message,
                at,
            } => {
                if running.operation == Operation::Deleting {
                    message.push_str(&format!(
                        "; the finalizer {FINALIZER} keeps the KubernetesCluster: \
                         edit its spec to retry the cleanup, or remove the finalizer to give up"
                    ));
                }
                self.set_condition("Ready", false, reason, message.clone());
                self.events
                    .push((EventType::Warning, "OperationFailed", message));
                self.finish(running, Phase::Failed, at);
                false
            }
        }
    }

    fn progress(&self, running: &RunningOperation) -> Progress {
        let job = self.observed.job(&running.job);
        if let Some(progress) = job.map(|j| &j.status) {
            if progress.succeeded() {
                return Progress::Succeeded {
                    at: progress.completion_time.unwrap_or(self.now),
                };
            }
            if progress.failed() {
                let condition = progress.condition("Failed");
                let why = condition
                    .map(|c| c.message.as_str())
                    .filter(|m| !m.is_empty())
                    .unwrap_or("its pod failed");
                return Progress::Failed {
                    reason: "JobFailed",
                    message: format!("{}: Job {} failed: {why}", running.operation, running.job),
                    at: condition
                        .and_then(|c| c.last_transition_time)
                        .unwrap_or(self.now),
                };
            }
        }
        let started = job
            .and_then(|j| j.status.start_time)
            .unwrap_or(running.started_at);
        let timeout = self.cluster.spec.timeout_seconds;
        let deadline = started
            .checked_add(SignedDuration::from_secs(timeout))
            .unwrap_or(Timestamp::MAX);
        if self.now >= deadline {
            Progress::Failed {
                reason: "TimedOut",
                message: format!(
                    "{}: Job {} ran past spec.timeoutSeconds ({timeout}s)",
                    running.operation, running.job
                ),
                at: deadline,
            }
        } else {
            Progress::Running { deadline }
        }
    }

    fn finish(&mut self, running: RunningOperation, phase: Phase, at: Timestamp) {
        self.status.phase = phase;
        self.status.running = None;
        self.status.last_operation = Some(running.operation);
        self.status.last_job = Some(running.job);
        self.status.finished_at = Some(at);
    }

    /// Keeps the last finished pair while it exists. Only a Job that ended
    /// by itself is kept: one that timed out is still running, and dropping
    /// it has the host delete it.
    fn keep_last(&mut self) {
        let (Some(operation), Some(job)) =
            (self.status.last_operation, self.status.last_job.clone())
        else {
            return;
        };
        let ended = self
            .observed
            .job(&job)
            .is_some_and(|j| j.status.succeeded() || j.status.failed());
        if let Some(record) = self.observed.record(&job) {
            self.records
                .push(record_from(self.cluster, &job, &record.data));
        }
        if ended {
            self.jobs
                .push(operation_job(self.cluster.name(), operation, &job));
        }
    }

    /// Returns the record and Job of the operation in flight, creating them
    /// if they do not exist yet. A record already written is
    /// returned as written, so the Job keeps working from the spec it
    /// started with.
    fn keep(&mut self, operation: Operation, job: &str, started_at: Timestamp) {
        let record = match self.observed.record(job) {
            Some(observed) => record_from(self.cluster, job, &observed.data),
            None => new_record(self.cluster, operation, job, started_at),
        };
        self.records.push(record);
        self.jobs
            .push(operation_job(self.cluster.name(), operation, job));
    }

    /// Sets a condition; true when its status or reason changed. The
    /// transition time moves only when the status does.
    fn set_condition(&mut self, type_: &str, ok: bool, reason: &str, message: String) -> bool {
        let status = if ok { "True" } else { "False" };
        let conditions = &mut self.status.conditions;
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                let changed = c.status != status || c.reason != reason;
                if c.status != status {
                    c.last_transition_time = Time(self.now);
                }
                c.status = status.into();
                c.reason = reason.into();
                c.message = message;
                changed
            }
            None => {
                conditions.push(Condition {
                    type_: type_.into(),
                    status: status.into(),
                    reason: reason.into(),
                    message,
                    last_transition_time: Time(self.now),
                    observed_generation: None,
                });
                true
            }
        }
    }

    fn into_response(self) -> Result<Response, Error> {
        let mut response = Response::new();
        // Records first: each Job reads its parameters from its record.
        for record in &self.records {
            response = response.apply(record)?;
        }
        for job in &self.jobs {
            response = response.apply(job)?;
        }
        for (event_type, reason, message) in self.events {
            response = response.event(event_type, reason, message);
        }
        if let Some(after) = self.requeue {
            response = response.requeue_after(after);
        }
        if self.finalized {
            response = response.finalized();
        }
        response.status(&self.status)
    }
}

fn labels(cluster: &str, operation: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
        (OPERATION_LABEL.to_string(), operation.to_string()),
    ])
}

/// The record of a new operation: what it is, when it started, its Job, and
/// the spec it works from.
fn new_record(
    cluster: &KubernetesCluster,
    operation: Operation,
    job: &str,
    started_at: Timestamp,
) -> ConfigMap {
    let spec = &cluster.spec;
    let data = BTreeMap::from([
        ("cluster".to_string(), cluster.name().to_string()),
        ("operation".to_string(), operation.to_string()),
        ("job".to_string(), job.to_string()),
        ("startedAt".to_string(), started_at.to_string()),
        ("masters".to_string(), spec.masters.to_string()),
        ("workers".to_string(), spec.workers.to_string()),
        ("version".to_string(), spec.version.clone()),
    ]);
    record_from(cluster, job, &data)
}

fn record_from(
    cluster: &KubernetesCluster,
    name: &str,
    data: &BTreeMap<String, String>,
) -> ConfigMap {
    let operation = data.get("operation").map_or("", String::as_str);
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels(cluster.name(), operation)),
            ..Default::default()
        },
        data: Some(data.clone()),
        ..Default::default()
    }
}

/// The Job of one operation. It depends only on its name, so returning it
/// again never asks to change a Job's immutable template; its parameters
/// come from its record.
fn operation_job(cluster: &str, operation: Operation, name: &str) -> Job {
    let labels = labels(cluster, operation.as_str());
    Job {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            // A failure is reported, not retried behind the user's back.
            backoff_limit: Some(0),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![Container {
                        name: operation.as_str().into(),
                        image: Some(JOB_IMAGE.into()),
                        command: Some(vec![
                            "sh".into(),
                            "-c".into(),
                            r#"echo "$operation cluster $cluster: $masters masters, $workers workers, Kubernetes $version""#.into(),
                        ]),
                        env_from: Some(vec![EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: name.to_string(),
                                optional: None,
                            }),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}
