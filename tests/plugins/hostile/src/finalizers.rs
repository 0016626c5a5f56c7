//! Finalizers across versions and deletion in a terminating namespace.

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
