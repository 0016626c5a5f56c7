//! A Plugin's spec, as the user writes it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::canary;
pub use super::canary::{CanaryPlan, Gate};
use crate::registry::PluginReference;
use crate::support::duration_text::parse_duration;

/// `spec` of a `reconciler-host.io/v1alpha1` Plugin.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PluginSpec {
    /// `oci://HOST/REPO:TAG`, `...@sha256:DIGEST`, `registry://...` or no scheme.
    pub source: String,
    /// How often a tag is resolved again (`30s`, `5m`, `1h`); unset: once per change of the spec.
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub verification: Option<Verification>,
    /// Docker config Secrets (in the host's namespace) with the registry's credentials.
    #[serde(default)]
    pub pull_secrets: Vec<LocalRef>,
    /// Reach the registry over plain HTTP.
    #[serde(default)]
    pub insecure: bool,
    /// A candidate version run beside the one `source` serves.
    #[serde(default)]
    pub rollout: Option<RolloutSpec>,
}

/// `spec.rollout`: the next version, and how it is tried.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// The candidate's source, in the forms `source` takes; verified as
    /// `spec.verification` says and pulled with the same secrets.
    pub candidate: String,
    /// `shadow` (the default): the candidate decides on every reconcile
    /// beside the serving version and is never applied. `canary`: it
    /// decides and writes for a growing share of the primaries.
    #[serde(default)]
    pub mode: Option<String>,
    /// Canary: the candidate's share at each step, in percent, rising to 100.
    #[serde(default)]
    pub steps: Vec<u32>,
    /// Canary: how long each step is watched before the next (`5m`).
    #[serde(default)]
    pub interval: Option<String>,
    /// Canary: only primaries in these namespaces are ever the candidate's.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Canary: only primaries with these labels are ever the candidate's.
    #[serde(default)]
    pub selector: Option<SelectorSpec>,
    /// Canary: what a step must stay within to pass.
    #[serde(default)]
    pub gate: Option<GateSpec>,
    /// Canary in waves across member clusters: each selector (of the
    /// clusters' labels) is a step, in order, each with its own gate.
    #[serde(default)]
    pub clusters: Vec<SelectorSpec>,
}

impl RolloutSpec {
    /// The canary plan this rollout describes, or what is wrong with it
    /// (naming the field).
    pub fn canary_plan(&self) -> Result<CanaryPlan, String> {
        let spec = self;
        let waves: Vec<BTreeMap<String, String>> = spec
            .clusters
            .iter()
            .map(|s| s.match_labels.clone())
            .collect();
        if !waves.is_empty() && !spec.steps.is_empty() {
            return Err("spec.rollout: give steps or clusters, not both: with clusters each wave of clusters is a step, in which the candidate decides for every eligible primary".into());
        }
        let steps = match (waves.is_empty(), spec.steps.is_empty()) {
            (false, _) => vec![100; waves.len()],
            (true, true) => canary::DEFAULT_STEPS.to_vec(),
            (true, false) => spec.steps.clone(),
        };
        if waves.is_empty() {
            canary::check_steps(&steps)?;
        }
        let interval = match &spec.interval {
            None => canary::DEFAULT_INTERVAL,
            Some(text) => {
                parse_duration(text).map_err(|e| format!("spec.rollout.interval: {e}"))?
            }
        };
        if interval < canary::MIN_INTERVAL {
            return Err(format!(
                "spec.rollout.interval is {interval:?}: a step lasts at least {}s, so its gate has reconciles to judge",
                canary::MIN_INTERVAL.as_secs()
            ));
        }
        let gate = spec.gate.clone().unwrap_or_default();
        let rate = |field: &str, value: Option<f64>| match value {
            Some(v) if !(0.0..=1.0).contains(&v) => Err(format!(
                "spec.rollout.gate.{field} is {v}: a share between 0 and 1"
            )),
            _ => Ok(value),
        };
        let max_error_rate =
            rate("maxErrorRate", gate.max_error_rate)?.unwrap_or(canary::DEFAULT_MAX_ERROR_RATE);
        let max_disagreement = rate("maxDisagreement", gate.max_disagreement)?;
        let max_p99 = gate
            .max_p99
            .as_deref()
            .map(parse_duration)
            .transpose()
            .map_err(|e| format!("spec.rollout.gate.maxP99: {e}"))?;
        Ok(CanaryPlan {
            steps,
            waves,
            interval,
            namespaces: spec.namespaces.iter().cloned().collect(),
            match_labels: spec
                .selector
                .as_ref()
                .map(|s| s.match_labels.clone())
                .unwrap_or_default(),
            gate: canary::Gate {
                max_error_rate,
                max_p99,
                max_disagreement,
            },
        })
    }
}

/// The canary plan of a `spec.rollout` given as JSON (tests build plans so).
#[cfg(test)]
pub fn rollout_plan(json: serde_json::Value) -> Result<CanaryPlan, String> {
    let spec: RolloutSpec = serde_json::from_value(json).map_err(|e| e.to_string())?;
    spec.canary_plan()
}

/// A label selector of equalities (`matchLabels`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SelectorSpec {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// `spec.rollout.gate`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GateSpec {
    /// The highest share of the candidate's reconciles that may fail
    /// (0 to 1; 0.05 unless given).
    #[serde(default)]
    pub max_error_rate: Option<f64>,
    /// The slowest the candidate's p99 reconcile may be (`2s`); unchecked
    /// unless given.
    #[serde(default)]
    pub max_p99: Option<String>,
    /// The highest share of shadow reconciles on the serving version's
    /// primaries in which the candidate may decide differently (0 to 1);
    /// unchecked unless given, since a new version usually means to differ.
    #[serde(default)]
    pub max_disagreement: Option<f64>,
}

/// How a candidate is tried.
#[derive(Clone, Debug, PartialEq)]
pub enum RolloutMode {
    /// Decides beside the serving version on every reconcile; never applied.
    Shadow,
    /// Decides and writes for its share of primaries, step by step, while
    /// the gate holds; rolled back by the host when it does not.
    Canary(CanaryPlan),
}

/// A valid `spec.rollout`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    pub candidate: PluginReference,
    pub mode: RolloutMode,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    /// Cosign public keys (PEM), each a key of a Secret or ConfigMap in the host's namespace.
    #[serde(default)]
    pub public_keys: Vec<KeyRef>,
    /// Keyless signers: a certificate subject (email or URI) and its OIDC issuer, checked against
    /// the trust root given to the host as files (`--sigstore-trust-root`).
    #[serde(default)]
    pub keyless: Vec<Identity>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    #[serde(default)]
    pub secret_ref: Option<KeyOf>,
    #[serde(default)]
    pub config_map_ref: Option<KeyOf>,
}

/// Where a public key is: which kind of object, its name, its data key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyLocation<'a> {
    /// `Secret` or `ConfigMap`.
    pub kind: &'static str,
    pub name: &'a str,
    pub data_key: &'a str,
}

impl KeyRef {
    /// Where the key is; the data key is `cosign.pub` unless given.
    /// A validated spec has exactly one of the two references.
    pub fn location(&self) -> KeyLocation<'_> {
        let (kind, of) = match (&self.secret_ref, &self.config_map_ref) {
            (Some(of), _) => ("Secret", of),
            (None, Some(of)) => ("ConfigMap", of),
            (None, None) => unreachable!("validated: one of secretRef and configMapRef"),
        };
        KeyLocation {
            kind,
            name: &of.name,
            data_key: of.key.as_deref().unwrap_or("cosign.pub"),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct KeyOf {
    pub name: String,
    /// The data key holding the PEM key; `cosign.pub` when left out.
    #[serde(default)]
    pub key: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct LocalRef {
    pub name: String,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Identity {
    pub subject: String,
    pub issuer: String,
}

/// A spec the host can act on.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidSpec {
    pub reference: PluginReference,
    pub interval: Option<Duration>,
    pub rollout: Option<Rollout>,
    pub raw: PluginSpec,
}

impl ValidSpec {
    /// The spec a candidate's follower follows: the candidate as source,
    /// with this spec's interval, verification, pull secrets and transport;
    /// `None` without `spec.rollout`.
    pub fn candidate(&self) -> Option<ValidSpec> {
        let rollout = self.rollout.as_ref()?;
        Some(ValidSpec {
            reference: rollout.candidate.clone(),
            interval: self.interval,
            rollout: None,
            raw: PluginSpec {
                source: rollout.candidate.to_string(),
                rollout: None,
                ..self.raw.clone()
            },
        })
    }

    /// `base`, with the source's registry reached over plain HTTP when the
    /// spec says `insecure`.
    pub fn registry_options(
        &self,
        base: &crate::registry::RegistryOptions,
    ) -> crate::registry::RegistryOptions {
        let mut options = base.clone();
        if self.raw.insecure {
            options.insecure.push(self.reference.registry().to_string());
        }
        options
    }
}

/// The shortest interval: a registry is not polled more often than this.
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);

impl PluginSpec {
    pub fn validate(self) -> Result<ValidSpec, String> {
        let reference =
            PluginReference::parse_source(&self.source).map_err(|e| format!("spec.source: {e}"))?;
        let interval = match &self.interval {
            None => None,
            Some(text) => {
                let d = crate::support::duration_text::parse_duration(text)
                    .map_err(|e| format!("spec.interval: {e}"))?;
                if d < MIN_INTERVAL {
                    return Err(format!(
                        "spec.interval is {text}: it must be at least {}s",
                        MIN_INTERVAL.as_secs()
                    ));
                }
                Some(d)
            }
        };
        if let Some(v) = &self.verification {
            for (i, key) in v.public_keys.iter().enumerate() {
                if key.secret_ref.is_some() == key.config_map_ref.is_some() {
                    return Err(format!(
                        "spec.verification.publicKeys[{i}]: give exactly one of secretRef and configMapRef"
                    ));
                }
            }
            if v.public_keys.is_empty() && v.keyless.is_empty() {
                return Err("spec.verification names no public key and no keyless identity: nothing could verify".into());
            }
        }
        let rollout = match &self.rollout {
            None => None,
            Some(r) => Some(Rollout {
                candidate: PluginReference::parse_source(&r.candidate)
                    .map_err(|e| format!("spec.rollout.candidate: {e}"))?,
                mode: match r.mode.as_deref() {
                    None | Some("shadow") => {
                        if !r.steps.is_empty()
                            || r.interval.is_some()
                            || r.gate.is_some()
                            || !r.clusters.is_empty()
                        {
                            return Err("spec.rollout: steps, interval, gate and clusters belong to mode canary; in mode shadow the candidate never writes".into());
                        }
                        RolloutMode::Shadow
                    }
                    Some("canary") => RolloutMode::Canary(r.canary_plan()?),
                    Some(other) => {
                        return Err(format!(
                            "spec.rollout.mode is {other:?}: it is shadow (the candidate decides beside the serving version and is never applied) or canary (it decides and writes for a growing share)"
                        ));
                    }
                },
            }),
        };
        Ok(ValidSpec {
            reference,
            interval,
            rollout,
            raw: self,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> Result<ValidSpec, String> {
        serde_json::from_value::<PluginSpec>(json)
            .map_err(|e| e.to_string())?
            .validate()
    }

    #[test]
    fn a_full_spec_is_understood() {
        let valid = spec(serde_json::json!({
            "source": "registry://r.example/plugins/podset:1",
            "interval": "1m",
            "verification": {"publicKeys": [{"secretRef": {"name": "keys"}}], "keyless": [{"subject": "a@b.c", "issuer": "https://idp"}]},
            "pullSecrets": [{"name": "pull"}],
            "insecure": true
        }))
        .unwrap();
        assert_eq!(valid.reference.repository(), "plugins/podset");
        assert_eq!(valid.interval, Some(Duration::from_secs(60)));
    }

    #[test]
    fn a_bad_source_interval_or_key_names_the_field() {
        let e = spec(serde_json::json!({"source": "podset:1"})).unwrap_err();
        assert!(e.starts_with("spec.source:"), "{e}");
        let e = spec(serde_json::json!({"source": "r.example/p:1", "interval": "1s"})).unwrap_err();
        assert!(e.starts_with("spec.interval"), "{e}");
        let e = spec(
            serde_json::json!({"source": "r.example/p:1", "verification": {"publicKeys": [{}]}}),
        )
        .unwrap_err();
        assert!(
            e.contains("exactly one of secretRef and configMapRef"),
            "{e}"
        );
        let e =
            spec(serde_json::json!({"source": "r.example/p:1", "verification": {}})).unwrap_err();
        assert!(e.contains("nothing could verify"), "{e}");
        let e =
            spec(serde_json::json!({"source": "r.example/p:1", "rollout": {"candidate": "p:2"}}))
                .unwrap_err();
        assert!(e.starts_with("spec.rollout.candidate:"), "{e}");
        let e = spec(serde_json::json!({"source": "r.example/p:1",
            "rollout": {"candidate": "r.example/p:2", "mode": "blue-green"}}))
        .unwrap_err();
        assert!(e.contains("shadow") && e.contains("canary"), "{e}");
        let e = spec(serde_json::json!({"source": "r.example/p:1",
            "rollout": {"candidate": "r.example/p:2", "steps": [10, 100]}}))
        .unwrap_err();
        assert!(e.contains("belong to mode canary"), "{e}");
    }

    #[test]
    fn a_rollout_candidate_is_followed_with_the_specs_trust_and_access() {
        let valid = spec(serde_json::json!({
            "source": "r.example/plugins/podset:1",
            "verification": {"publicKeys": [{"secretRef": {"name": "keys"}}]},
            "pullSecrets": [{"name": "pull"}],
            "rollout": {"candidate": "r.example/plugins/podset:2"}
        }))
        .unwrap();
        assert_eq!(valid.rollout.as_ref().unwrap().mode, RolloutMode::Shadow);
        let candidate = valid.candidate().unwrap();
        assert_eq!(
            candidate.reference.to_string(),
            "oci://r.example/plugins/podset:2"
        );
        assert_eq!(candidate.raw.verification, valid.raw.verification);
        assert_eq!(candidate.raw.pull_secrets, valid.raw.pull_secrets);
        assert!(candidate.candidate().is_none());
    }
}
