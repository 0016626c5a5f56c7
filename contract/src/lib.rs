//! The contract between reconciler-host and its plugins, in Rust.
//!
//! `wit/reconciler.wit` is the contract; this crate is what both sides of it
//! need to agree on beyond the generated bindings: plain types mirroring the
//! WIT records ([`types`]), the label-selector syntax and semantics of the
//! cache's `list` ([`selector`]), and the cache rules a plugin observes:
//! declared kinds only, same-namespace read kinds, metadata-only projection,
//! ordering, children by controller ownerReference ([`types::PluginMetadata`]
//! and [`memory_cache`]).
//!
//! The host serves plugins by these rules; the Rust SDK (`reconciler-sdk`, a
//! guest library) re-exports the types and its native test harness applies
//! the same rules, so a plugin tested natively sees what it sees in the host.

pub mod admission;
pub mod json_depth;
mod list_pages;
pub mod memory_cache;
pub mod names;
pub mod object_meta;
pub mod quoted;
pub mod response_caps;
pub mod response_rules;
pub mod selector;
pub mod triggers;
pub mod types;

pub use admission::{
    AdmissionRequest, AdmissionSettings, FailurePolicy, Operation, UserInfo, Verdict,
};
pub use types::*;

/// The clock of a test or golden case that sets none: 2024-01-01T00:00:00Z.
/// The SDK's harness and `reconciler-host test` share it, so a native test
/// and a golden case agree.
pub const DEFAULT_NOW_MILLIS: i64 = 1_704_067_200_000;
