//! Deletes and applies of objects this primary does not control: a
//! stranger's, a sibling primary's, an orphan.

use reconciler_sdk::{Context, Error, Response};

use crate::Hostile;

/// The response for `mode`, if it is one of this module's.
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let _ = (hostile, ctx);
    match mode {
        _ => None,
    }
}
