//! How many requests of each kind one response may carry, and the first
//! count over its cap. The host checks a guest's answer with its resolved
//! limits (`--plugin-events` and friends, raised by hints); the SDK
//! harnesses check with the hints or the host's out-of-the-box defaults,
//! which are these constants. One rule, so a response a native test
//! accepts is one the host accepts.

use crate::{Hints, ReconcileResponse};

pub const DEFAULT_MAX_EVENTS: u32 = 25;
pub const DEFAULT_MAX_APPLIES: u32 = 500;
pub const DEFAULT_MAX_DELETES: u32 = 500;

/// How many requests of each kind a response carries.
#[derive(Clone, Copy, Debug)]
pub struct ResponseCounts {
    pub events: usize,
    pub applies: usize,
    pub deletes: usize,
}

impl ResponseCounts {
    pub fn of(response: &ReconcileResponse) -> Self {
        Self {
            events: response.events.len(),
            applies: response.apply.len(),
            deletes: response.delete.len(),
        }
    }
}

/// The most of each a response may carry.
#[derive(Clone, Copy, Debug)]
pub struct ResponseCaps {
    pub events: usize,
    pub applies: usize,
    pub deletes: usize,
}

impl ResponseCaps {
    /// The hints' caps, else the defaults.
    pub fn of_hints(hints: &Hints) -> Self {
        let cap = |hint: Option<u32>, default: u32| hint.unwrap_or(default) as usize;
        Self {
            events: cap(hints.max_events, DEFAULT_MAX_EVENTS),
            applies: cap(hints.max_applies, DEFAULT_MAX_APPLIES),
            deletes: cap(hints.max_deletes, DEFAULT_MAX_DELETES),
        }
    }
}

/// A count over its cap: what, how many, the cap, and the hint that moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverCap {
    pub what: &'static str,
    pub count: usize,
    pub limit: usize,
    pub hint: &'static str,
}

/// The first count over its cap, checked Events, applies, deletes.
pub fn first_over(counts: ResponseCounts, caps: ResponseCaps) -> Option<OverCap> {
    [
        ("Events", counts.events, caps.events, "maxEvents"),
        (
            "objects to apply",
            counts.applies,
            caps.applies,
            "maxApplies",
        ),
        (
            "objects to delete",
            counts.deletes,
            caps.deletes,
            "maxDeletes",
        ),
    ]
    .into_iter()
    .find(|(_, count, limit, _)| count > limit)
    .map(|(what, count, limit, hint)| OverCap {
        what,
        count,
        limit,
        hint,
    })
}

/// The harness's words for a response over the caps its hints (or the
/// defaults) set: `None` when it passes them.
pub fn over_cap(response: &ReconcileResponse, hints: &Hints) -> Option<String> {
    first_over(ResponseCounts::of(response), ResponseCaps::of_hints(hints)).map(|o| {
        format!(
            "the response carries {} {}, over the limit of {} per response (raise it with hints.{})",
            o.count, o.what, o.limit, o.hint
        )
    })
}
