//! Admission from the same plugin: what a [`crate::Reconciler`] sees when it
//! opts in (by returning settings from [`crate::Reconciler::admission`]).
//!
//! The Wasm export and the native harness both go through
//! [`dispatch_validate`] and [`dispatch_defaults`], so a plugin tested
//! natively parses and answers exactly as it does in the host.

use serde::de::DeserializeOwned;

use crate::{Error, Reconciler};
use reconciler_contract::{AdmissionRequest, Operation, UserInfo, Verdict};

/// One admission request with the objects typed as the plugin's primary.
#[derive(Debug)]
pub struct Admission<P> {
    pub operation: Operation,
    /// The new object: create and update.
    pub object: Option<P>,
    /// The object before the change: update and delete.
    pub old_object: Option<P>,
    pub user_info: UserInfo,
    /// Nothing will be persisted (`kubectl --dry-run=server`).
    pub dry_run: bool,
}

impl<P: DeserializeOwned> Admission<P> {
    /// Parses the request's objects as the primary type.
    pub fn parse(request: &AdmissionRequest) -> Result<Self, Error> {
        let typed = |text: &Option<String>, what: &str| {
            text.as_deref()
                .map(|t| serde_json::from_str(t).map_err(|e| Error::parse(what, e)))
                .transpose()
        };
        Ok(Self {
            operation: request.operation,
            object: typed(&request.object, "the admitted object")?,
            old_object: typed(&request.old_object, "the admitted old object")?,
            user_info: request.user_info.clone(),
            dry_run: request.dry_run,
        })
    }
}

/// Runs `validate` from wire form to wire form.
pub fn dispatch_validate<R: Reconciler>(request: &AdmissionRequest) -> Result<Verdict, String> {
    let admission = Admission::<R::Primary>::parse(request).map_err(|e| e.to_string())?;
    R::validate(&admission).map_err(|e| e.to_string())
}

/// Runs `apply_defaults` from wire form to wire form: the defaulted object,
/// or none when the plugin changed nothing (or there is no object).
pub fn dispatch_defaults<R: Reconciler>(
    request: &AdmissionRequest,
) -> Result<Option<String>, String> {
    let Some(text) = request.object.as_deref() else {
        return Ok(None);
    };
    let admission = Admission::<R::Primary>::parse(request).map_err(|e| e.to_string())?;
    let original: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Error::parse("the admitted object", e).to_string())?;
    let mut object = original.clone();
    R::apply_defaults(&mut object, &admission).map_err(|e| e.to_string())?;
    if object == original {
        return Ok(None);
    }
    serde_json::to_string(&object)
        .map(Some)
        .map_err(|e| format!("cannot serialise the defaulted object: {e}"))
}
