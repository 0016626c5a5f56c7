//! Admission that misbehaves on request: `spec.mode` of the admitted object
//! picks how, so the tests can prove each is answered by the failure policy
//! (Fail, or Ignore when built with `admission-ignore`) and never hangs or
//! crashes the host.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use reconciler_sdk::{Admission, AdmissionSettings, Error, FailurePolicy, Verdict};
use serde_json::{Value, json};

use crate::Hostile;

pub(crate) fn settings() -> AdmissionSettings {
    let policy = if cfg!(feature = "admission-ignore") {
        FailurePolicy::Ignore
    } else {
        FailurePolicy::Fail
    };
    // A short deadline keeps the infinite-loop case quick.
    AdmissionSettings::validating()
        .mutating()
        .failure_policy(policy)
        .timeout_ms(300)
}

fn mode(request: &Admission<Hostile>) -> &str {
    request.object.as_ref().map_or("", |h| h.spec.mode.as_str())
}

pub(crate) fn validate(request: &Admission<Hostile>) -> Result<Verdict, Error> {
    match mode(request) {
        "admit-trap" => panic!("hostile admission trap"),
        "admit-loop" =>
        {
            #[allow(clippy::empty_loop)]
            loop {}
        }
        "admit-error" => Err(Error::msg("hostile admission error")),
        "admit-deny" => Ok(Verdict::deny("hostile says no").warn("hostile warns")),
        "admit-flood" => {
            let mut verdict = Verdict::deny("x".repeat(100_000));
            verdict.warnings = vec!["w".repeat(10_000); 1000];
            Ok(verdict)
        }
        _ => Ok(Verdict::allow()),
    }
}

pub(crate) fn apply_defaults(
    object: &mut Value,
    request: &Admission<Hostile>,
) -> Result<(), Error> {
    match mode(request) {
        "admit-rename" => object["metadata"]["name"] = json!("someone-else"),
        "admit-finalizers" => object["metadata"]["finalizers"] = json!([]),
        "admit-kind" => object["kind"] = json!("ConfigMap"),
        // A token drawn from the call's randomness (a HashMap's seed, WASI
        // insecure-seed), as a plugin defaulting a name suffix would.
        "admit-token" => {
            let token = RandomState::new().hash_one("token");
            object["spec"]["token"] = json!(format!("{token:016x}"));
        }
        _ => {
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("defaulted".to_string(), json!(true));
            }
        }
    }
    Ok(())
}
