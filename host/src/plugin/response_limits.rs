//! How much one response may ask of the host, checked before anything in
//! it is looked at further.
//!
//! The output cap bounds a response's bytes, not its requests: 100,000
//! Events fit in 600 KB, and each would be a POST to the API server. So
//! each kind of request is capped per response (Events, applies, deletes;
//! the plugin's hints may raise a cap up to the host's maximum), and a
//! response over a cap is refused whole, like any invalid response, naming
//! the cap and the knob that moves it.
//!
//! Nesting is capped too: the host parses, stores and re-reads what a
//! plugin returns, and JSON nested past serde_json's recursion limit
//! parses once and then never again (a status at that limit sits one level
//! deeper inside its object). [`MAX_NESTING`] leaves room for every
//! wrapping on the way: the status inside the object, `managedFields`,
//! watch events and list responses.

use reconciler_contract::ReconcileResponse;
use reconciler_contract::json_depth::nesting_depth;
use reconciler_contract::response_caps::{OverCap, ResponseCaps, first_over};

use super::limits::SandboxLimits;

/// How deeply an applied object or a status may nest. A Deployment nests
/// about 10 levels; half of serde_json's 128 is far beyond any honest
/// object and far below what would make it unreadable.
pub const MAX_NESTING: usize = 64;

/// A response asking more than its plugin may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseOverLimit {
    #[error(
        "the response carries {count} {what}, over the limit of {limit} per response (raise it with hints.{hint}, up to {option})"
    )]
    TooMany {
        what: &'static str,
        count: usize,
        limit: usize,
        hint: &'static str,
        option: &'static str,
    },
    #[error(
        "{item} is nested {depth} levels deep, more than the {limit} levels a response may nest (the host could not read it back once stored)"
    )]
    TooDeep {
        item: String,
        depth: usize,
        limit: usize,
    },
}

impl ResponseOverLimit {
    /// A short, stable name for metrics and Event reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            ResponseOverLimit::TooMany { hint, .. } => match *hint {
                "maxEvents" => "TooManyEvents",
                "maxApplies" => "TooManyApplies",
                _ => "TooManyDeletes",
            },
            ResponseOverLimit::TooDeep { .. } => "NestedTooDeep",
        }
    }
}

/// Checks the counts, then the nesting, of `response` against `limits`.
pub fn check_response_limits(
    response: &ReconcileResponse,
    limits: &SandboxLimits,
) -> Result<(), ResponseOverLimit> {
    check_counts(ResponseCounts::of(response), limits)?;
    let texts = response
        .apply
        .iter()
        .enumerate()
        .map(|(i, text)| (format!("apply[{i}]"), text))
        .chain(response.status.iter().map(|s| ("status".to_string(), s)));
    for (item, text) in texts {
        let depth = nesting_depth(text);
        if depth > MAX_NESTING {
            return Err(ResponseOverLimit::TooDeep {
                item,
                depth,
                limit: MAX_NESTING,
            });
        }
    }
    Ok(())
}

pub use reconciler_contract::response_caps::ResponseCounts;

/// Checks the counts alone: what the host can check of a response as the
/// guest handed it over, before copying its lists into its own types.
pub fn check_counts(
    counts: ResponseCounts,
    limits: &SandboxLimits,
) -> Result<(), ResponseOverLimit> {
    let caps = ResponseCaps {
        events: limits.max_events,
        applies: limits.max_applies,
        deletes: limits.max_deletes,
    };
    match first_over(counts, caps) {
        None => Ok(()),
        Some(OverCap {
            what,
            count,
            limit,
            hint,
        }) => Err(ResponseOverLimit::TooMany {
            what,
            count,
            limit,
            hint,
            option: match hint {
                "maxEvents" => "--plugin-events-max",
                "maxApplies" => "--plugin-applies-max",
                _ => "--plugin-deletes-max",
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use reconciler_contract::Hints;
    use reconciler_contract::{Event, EventType, ObjectRef};

    use super::*;
    use crate::plugin::HostLimits;

    fn limits() -> SandboxLimits {
        HostLimits::default().resolve(&Hints::default()).unwrap()
    }

    fn event() -> Event {
        Event {
            event_type: EventType::Normal,
            reason: "Flood".into(),
            message: String::new(),
        }
    }

    fn object_ref(i: usize) -> ObjectRef {
        ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            name: format!("c{i}"),
        }
    }

    fn nested(levels: usize) -> String {
        "{\"a\":".repeat(levels - 1) + "{}" + &"}".repeat(levels - 1)
    }

    #[test]
    fn responses_at_the_caps_pass() {
        let limits = limits();
        let response = ReconcileResponse {
            apply: vec!["{}".into(); limits.max_applies],
            delete: (0..limits.max_deletes).map(object_ref).collect(),
            events: vec![event(); limits.max_events],
            status: Some(nested(MAX_NESTING)),
            ..Default::default()
        };
        assert_eq!(check_response_limits(&response, &limits), Ok(()));
    }

    #[test]
    fn one_over_a_count_cap_names_the_cap_the_hint_and_the_option() {
        let limits = limits();
        let over = [
            ReconcileResponse {
                events: vec![event(); limits.max_events + 1],
                ..Default::default()
            },
            ReconcileResponse {
                apply: vec!["{}".into(); limits.max_applies + 1],
                ..Default::default()
            },
            ReconcileResponse {
                delete: (0..=limits.max_deletes).map(object_ref).collect(),
                ..Default::default()
            },
        ];
        let expected = [
            (
                "the response carries 26 Events, over the limit of 25 per response",
                "hints.maxEvents, up to --plugin-events-max",
                "TooManyEvents",
            ),
            (
                "501 objects to apply, over the limit of 500",
                "hints.maxApplies, up to --plugin-applies-max",
                "TooManyApplies",
            ),
            (
                "501 objects to delete, over the limit of 500",
                "hints.maxDeletes, up to --plugin-deletes-max",
                "TooManyDeletes",
            ),
        ];
        for (response, (cap, knob, reason)) in over.iter().zip(expected) {
            let err = check_response_limits(response, &limits).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(cap) && text.contains(knob), "{text}");
            assert_eq!(err.reason(), reason);
        }
    }

    #[test]
    fn a_status_or_object_nested_too_deep_is_named() {
        let limits = limits();
        let deep_status = ReconcileResponse {
            status: Some(nested(127)),
            ..Default::default()
        };
        let err = check_response_limits(&deep_status, &limits).unwrap_err();
        assert_eq!(
            err.to_string(),
            "status is nested 127 levels deep, more than the 64 levels a response may nest (the host could not read it back once stored)"
        );
        let deep_object = ReconcileResponse {
            apply: vec!["{}".into(), nested(MAX_NESTING + 1)],
            ..Default::default()
        };
        let err = check_response_limits(&deep_object, &limits).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("apply[1] is nested 65 levels deep"),
            "{err}"
        );
    }
}
