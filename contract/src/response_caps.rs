//! How many requests of each kind one response may carry when a plugin's
//! hints ask for no other cap. The host's defaults (`--plugin-events` and
//! friends) and the SDK harnesses' caps are these, so a response a native
//! test accepts is one the host accepts.

use crate::Hints;

pub const DEFAULT_MAX_EVENTS: u32 = 25;
pub const DEFAULT_MAX_APPLIES: u32 = 500;
pub const DEFAULT_MAX_DELETES: u32 = 500;

/// The first cap `response` passes, as the host words it: `None` when it
/// passes none. Caps are the hints', else the defaults (the host's own
/// defaults may be changed by its operator; these are its out-of-the-box
/// ones).
pub fn over_cap(response: &crate::ReconcileResponse, hints: &Hints) -> Option<String> {
    [
        ("Events", response.events.len(), hints.max_events, DEFAULT_MAX_EVENTS, "maxEvents"),
        (
            "objects to apply",
            response.apply.len(),
            hints.max_applies,
            DEFAULT_MAX_APPLIES,
            "maxApplies",
        ),
        (
            "objects to delete",
            response.delete.len(),
            hints.max_deletes,
            DEFAULT_MAX_DELETES,
            "maxDeletes",
        ),
    ]
    .into_iter()
    .find_map(|(what, count, hint, default, name)| {
        let limit = hint.unwrap_or(default) as usize;
        (count > limit).then(|| {
            format!(
                "the response carries {count} {what}, over the limit of {limit} per response (raise it with hints.{name})"
            )
        })
    })
}
