//! Write reconciler-host plugins in Rust.
//!
//! A plugin implements [`Reconciler`] for one primary kind and calls
//! [`export_plugin!`] once. Built for `wasm32-wasip2` it is a component the
//! host loads; built natively, the same code runs under
//! [`testing::Harness`], so `cargo test` exercises the logic without Wasm.
//!
//! ```ignore
//! struct PodSets;
//! impl reconciler_sdk::Reconciler for PodSets {
//!     type Primary = PodSet;
//!     fn metadata() -> PluginMetadata { /* kinds it owns, reads, writes */ }
//!     fn reconcile(podset: PodSet, ctx: &Context) -> Result<Response, Error> { /* ... */ }
//! }
//! reconciler_sdk::export_plugin!(PodSets);
//! ```
//!
//! The contract a plugin must keep (idempotent decisions, no effects beyond
//! the response, full desired state every time) is documented in
//! `wit/reconciler.wit`; this crate only makes it typed.

extern crate self as reconciler_sdk;

pub mod admission;
pub mod context;
pub mod error;
pub mod object;
pub mod response;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod guest;

/// The contract's types (`reconciler-contract`), where plugins have always
/// found them.
pub mod contract {
    pub use reconciler_contract::types::*;
}
pub use reconciler_contract::{json_depth, memory_cache, selector};

pub use admission::Admission;
pub use context::{Context, HostApi};
pub use contract::{ClusterInfo, EventType, Hints, KindRef, LogLevel, MapRule, PluginMetadata};
pub use error::Error;
pub use k8s_openapi;
pub use object::{Object, PartialObject};
pub use reconciler_contract::{
    AdmissionRequest, AdmissionSettings, Change, FailurePolicy, KindTrigger, Operation, UserInfo,
    Verdict,
};
pub use response::Response;

use serde::de::DeserializeOwned;

use reconciler_contract::{ReconcileRequest, ReconcileResponse};

/// The one trait a plugin implements.
pub trait Reconciler {
    /// The primary kind, typed: a k8s-openapi type for built-in kinds, an
    /// [`Object`] of your own spec and status for custom ones.
    type Primary: DeserializeOwned;

    /// What the plugin is and which kinds it may touch. Called once at load.
    fn metadata() -> PluginMetadata;

    /// Decide the desired state of `primary`. Must be idempotent and have no
    /// effects beyond the returned [`Response`].
    fn reconcile(primary: Self::Primary, ctx: &Context) -> Result<Response, Error>;

    /// Whether the plugin serves admission for its primary kind, and how.
    /// `None` (the default) serves none: [`Self::validate`] and
    /// [`Self::apply_defaults`] are then never called.
    fn admission() -> Option<AdmissionSettings> {
        None
    }

    /// Allow or deny one admission request. Deny with [`Verdict::deny`]; an
    /// `Err` is a failure, handled by the declared
    /// [`AdmissionSettings::failure_policy`]. Cannot read the cache: decide
    /// from the request alone.
    fn validate(request: &Admission<Self::Primary>) -> Result<Verdict, Error> {
        let _ = request;
        Ok(Verdict::allow())
    }

    /// Fill in defaults on `object` (the request's object as JSON), for a
    /// plugin that declared [`AdmissionSettings::mutating`]. Called before
    /// [`Self::validate`], which then sees the defaulted object. Work on the
    /// JSON, not a typed copy, so that fields the type does not know are kept.
    fn apply_defaults(
        object: &mut serde_json::Value,
        request: &Admission<Self::Primary>,
    ) -> Result<(), Error> {
        let _ = (object, request);
        Ok(())
    }
}

/// Runs one reconcile from wire form to wire form. The Wasm export and the
/// native harness both go through here, so they parse and serialise
/// identically.
pub fn dispatch<R: Reconciler>(
    request: &ReconcileRequest,
    host: &dyn HostApi,
) -> Result<ReconcileResponse, String> {
    let primary: R::Primary = serde_json::from_str(&request.primary)
        .map_err(|e| Error::parse("the primary object", e).to_string())?;
    let ctx = Context::new(host, &request.children, request.deleting);
    R::reconcile(primary, &ctx)
        .map(Response::into_wire)
        .map_err(|e| e.to_string())
}

/// Exports a [`Reconciler`] as the plugin's implementation of the WIT world.
///
/// Expands to nothing on native targets, so the same crate builds for tests.
#[macro_export]
macro_rules! export_plugin {
    ($reconciler:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __ReconcilerExport;
            impl $crate::guest::GuestExports for __ReconcilerExport {
                type Reconciler = $reconciler;
            }
    $crate::guest::export_world!(__ReconcilerExport with_types_in $crate::guest);
        };
    };
}
