//! Admission calls into a plugin: its declaration at load, and one
//! AdmissionReview's defaulting and validation.
//!
//! The flow for one request (see the `admission` interface in the WIT):
//!   1. operations the plugin did not declare are admitted untouched;
//!   2. a mutating plugin's `apply-defaults` runs first, in a fresh
//!      instance, and its object becomes a JSON patch (admission_rules.rs);
//!   3. `validate` runs in another fresh instance on the defaulted object;
//!   4. any failure (trap, timeout, error, invalid answer) is answered by the
//!      declared failure policy, never by hanging or crashing the server.
//!
//! Each call runs under the plugin's sandbox limits with the admission
//! deadline instead of the reconcile one: the API server is waiting.

use std::sync::Arc;
use std::time::Duration;

use reconciler_contract::{
    AdmissionRequest, AdmissionSettings, ClusterInfo, FailurePolicy, Operation, UserInfo, Verdict,
};
use serde_json::Value;

use super::admission_rules::{InvalidDefaults, bounded_verdict, defaults_patch};
use super::bindings::{PluginPre, admission as wit};
use super::call_random::{CallRandom, CallSubject};
use super::call_state::CallState;
use super::errors::CallError;
use super::limits::SandboxLimits;
use super::loaded::{Call, LoadedPlugin, call_fresh};

/// Which of a plugin's admission calls one request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionPhase {
    /// Defaulting, then validation of the defaulted object: what `test`,
    /// `dev` and `simulate` run, where nothing else mutates in between.
    Both,
    /// Defaulting only: the API server's mutating webhook.
    Mutate,
    /// Validation only: the API server's validating webhook, which sees the
    /// object after every mutating webhook ran.
    Validate,
}

/// What the host answers the API server for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionDecision {
    pub allowed: bool,
    pub message: Option<String>,
    pub warnings: Vec<String>,
    /// JSON Patch operations to apply to the object (empty: none).
    pub patch: Vec<Value>,
    /// The failure the declared policy answered, if any.
    pub failure: Option<String>,
}

impl AdmissionDecision {
    /// Allowed, with `patch` (empty: unchanged) and nothing to say.
    fn admitted(patch: Vec<Value>) -> Self {
        Self {
            allowed: true,
            message: None,
            warnings: Vec::new(),
            patch,
            failure: None,
        }
    }

    /// `failure` answered by `policy`: denied with it as the message, or
    /// admitted unchanged with it as a warning.
    pub fn failed(policy: FailurePolicy, failure: String) -> Self {
        let (allowed, message, warnings) = match policy {
            FailurePolicy::Fail => (
                false,
                Some(format!("{failure} (failure policy Fail: denied)")),
                Vec::new(),
            ),
            FailurePolicy::Ignore => (
                true,
                None,
                vec![format!(
                    "{failure} (failure policy Ignore: admitted unchecked)"
                )],
            ),
        };
        Self {
            allowed,
            message,
            warnings,
            patch: Vec::new(),
            failure: Some(failure),
        }
    }
}

/// Why one admission call produced no usable answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AdmissionError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error(transparent)]
    Defaults(#[from] InvalidDefaults),
    #[error("the plugin exports no admission interface")]
    NotExported,
    #[error("the admitted object is not JSON: {0}")]
    BadObject(String),
}

impl LoadedPlugin {
    /// The plugin's admission declaration, or none when it serves none.
    pub fn admission(&self) -> Option<&AdmissionSettings> {
        self.admission.as_ref()
    }

    /// Sets the declaration read at load.
    pub(crate) fn with_admission(mut self, settings: Option<AdmissionSettings>) -> Self {
        self.admission = settings;
        self
    }

    /// Calls `settings` in a fresh instance, like `metadata`: none for a
    /// plugin that does not export the admission interface (one built for
    /// 0.2.0, or for the `plugin` world).
    pub(super) fn call_admission_settings(
        pre: &PluginPre<CallState>,
        call: Call<'_>,
    ) -> Result<Option<AdmissionSettings>, CallError> {
        if !pre.exports_admission() {
            return Ok(None);
        }
        call_fresh(pre, call, |p, store| match p.admission() {
            Some(a) => a.call_settings(store),
            None => Ok(None),
        })
        .map(|s| s.map(settings_from_wit))
    }

    /// The sandbox limits of an admission call: the plugin's, with the
    /// admission deadline.
    pub fn admission_limits(&self) -> SandboxLimits {
        let timeout_ms = self
            .admission
            .as_ref()
            .and_then(|s| s.timeout_ms)
            .unwrap_or(AdmissionSettings::DEFAULT_TIMEOUT_MS);
        SandboxLimits {
            timeout: Duration::from_millis(u64::from(timeout_ms)),
            ..self.limits()
        }
    }

    /// Decides one request: defaults, then validates, and answers any
    /// failure by the declared policy. `object` names the object in logs.
    ///
    /// For callers with no AdmissionReview (`test`, `dev`, `simulate`): the
    /// request is named by the object and the time, which keeps their runs
    /// repeatable and still gives two objects two random streams.
    pub fn admit(
        &self,
        request: AdmissionRequest,
        object: &str,
        now_millis: i64,
    ) -> AdmissionDecision {
        let request_uid = format!("{object}@{now_millis}");
        self.admit_in(
            AdmissionPhase::Both,
            request,
            &request_uid,
            object,
            now_millis,
        )
    }

    /// [`Self::admit`], running only the calls of `phase`. `request_uid`
    /// (the AdmissionReview's uid) seeds the randomness the plugin sees, so
    /// each request draws its own.
    pub fn admit_in(
        &self,
        phase: AdmissionPhase,
        request: AdmissionRequest,
        request_uid: &str,
        object: &str,
        now_millis: i64,
    ) -> AdmissionDecision {
        let Some(settings) = self.admission.clone() else {
            return AdmissionDecision::admitted(Vec::new());
        };
        if !settings.effective_operations().contains(&request.operation) {
            return AdmissionDecision::admitted(Vec::new());
        }
        let call = AdmissionCall {
            request_uid,
            object,
            now_millis,
        };
        match self.try_admit(&settings, phase, request, &call) {
            Ok(decision) => decision,
            Err(error) => {
                let failure = format!(
                    "plugin {} failed admission of {object}: {error}",
                    self.name()
                );
                tracing::warn!(plugin = self.name(), object, %error, policy = %settings.failure_policy, "admission call failed");
                AdmissionDecision::failed(settings.failure_policy, failure)
            }
        }
    }

    fn try_admit(
        &self,
        settings: &AdmissionSettings,
        phase: AdmissionPhase,
        mut request: AdmissionRequest,
        call: &AdmissionCall<'_>,
    ) -> Result<AdmissionDecision, AdmissionError> {
        let mut patch = Vec::new();
        let defaults_apply = matches!(request.operation, Operation::Create | Operation::Update);
        if settings.mutating
            && phase != AdmissionPhase::Validate
            && defaults_apply
            && let Some(text) = request.object.clone()
        {
            let original: Value = serde_json::from_str(&text)
                .map_err(|e| AdmissionError::BadObject(e.to_string()))?;
            let defaulted = self.call_admission(call, &request, |a, store, r| {
                a.call_apply_defaults(store, r)
            })?;
            if let Some(defaulted) = defaulted {
                patch = defaults_patch(&original, &defaulted, self.limits().output_bytes)?;
                if !patch.is_empty() {
                    request.object = Some(defaulted);
                }
            }
        }
        if phase == AdmissionPhase::Mutate {
            return Ok(AdmissionDecision::admitted(patch));
        }
        let verdict =
            self.call_admission(call, &request, |a, store, r| a.call_validate(store, r))?;
        let verdict = bounded_verdict(verdict_from_wit(verdict));
        if !verdict.allowed {
            patch.clear();
        }
        Ok(AdmissionDecision {
            allowed: verdict.allowed,
            message: verdict.message,
            warnings: verdict.warnings,
            patch,
            failure: None,
        })
    }

    /// One call of the admission interface in a fresh instance.
    fn call_admission<T>(
        &self,
        call: &AdmissionCall<'_>,
        request: &AdmissionRequest,
        f: impl FnOnce(
            &wit::Guest,
            &mut wasmtime::Store<CallState>,
            &wit::AdmissionRequest,
        ) -> wasmtime::Result<Result<T, String>>,
    ) -> Result<T, AdmissionError> {
        let limits = self.admission_limits();
        let random = CallRandom::new(
            &self.random_key,
            self.sha256(),
            CallSubject::Admission(call.request_uid),
        );
        let call = Call {
            limits,
            scope: None,
            now_millis: call.now_millis,
            cluster: Arc::new(ClusterInfo::local()),
            plugin: self.name(),
            object: call.object,
            random,
            ticker: &self.ticker,
            memory: self.admission_memory.charge(),
        };
        let wit_request = request_to_wit(request);
        let answer = call_fresh(&self.pre(), call, |p, store| {
            p.admission().map(|a| f(a, store, &wit_request)).transpose()
        })
        .map_err(AdmissionError::Call)?;
        answer
            .ok_or(AdmissionError::NotExported)?
            .map_err(|e| AdmissionError::Call(CallError::Plugin(e)))
    }
}

/// One request's identity, for its calls' randomness, logs and clocks.
struct AdmissionCall<'a> {
    request_uid: &'a str,
    object: &'a str,
    now_millis: i64,
}

fn operation_from_wit(op: wit::Operation) -> Operation {
    match op {
        wit::Operation::Create => Operation::Create,
        wit::Operation::Update => Operation::Update,
        wit::Operation::Delete => Operation::Delete,
        wit::Operation::Connect => Operation::Connect,
    }
}

fn operation_to_wit(op: Operation) -> wit::Operation {
    match op {
        Operation::Create => wit::Operation::Create,
        Operation::Update => wit::Operation::Update,
        Operation::Delete => wit::Operation::Delete,
        Operation::Connect => wit::Operation::Connect,
    }
}

fn settings_from_wit(s: wit::AdmissionSettings) -> AdmissionSettings {
    AdmissionSettings {
        operations: s.operations.into_iter().map(operation_from_wit).collect(),
        mutating: s.mutating,
        failure_policy: match s.failure_policy {
            wit::FailurePolicy::Fail => FailurePolicy::Fail,
            wit::FailurePolicy::Ignore => FailurePolicy::Ignore,
        },
        timeout_ms: s.timeout_ms,
    }
}

fn request_to_wit(r: &AdmissionRequest) -> wit::AdmissionRequest {
    let UserInfo {
        username,
        uid,
        groups,
        extra,
    } = &r.user_info;
    wit::AdmissionRequest {
        operation: operation_to_wit(r.operation),
        object: r.object.clone(),
        old_object: r.old_object.clone(),
        user_info: wit::UserInfo {
            username: username.clone(),
            uid: uid.clone(),
            groups: groups.clone(),
            extra: extra.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        },
        dry_run: r.dry_run,
    }
}

fn verdict_from_wit(v: wit::Verdict) -> Verdict {
    Verdict {
        allowed: v.allowed,
        message: v.message,
        warnings: v.warnings,
    }
}
