//! Responses that set fields the host owns, or metadata the API server
//! would refuse.

use reconciler_sdk::{Context, Error, Response};

use crate::Hostile;

/// The response for `mode`, if it is one of this module's.
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let _ = (mode, hostile, ctx);
    None
}
