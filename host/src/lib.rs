//! reconciler-host: a Kubernetes controller host whose reconcile decisions
//! run as sandboxed WebAssembly components.
//!
//! - [`plugin`]: load components, run each reconcile in a fresh sandboxed
//!   instance, validate what comes back.
//! - [`golden`]: golden cases (`reconciler-host test`) against a compiled plugin.
//! - [`cli`]: the `reconciler-host` command line.

pub mod admission;
pub mod cli;
pub mod cluster;
pub mod decision_diff;
pub mod engine;
pub mod fleet;
pub mod golden;
pub mod plugin;
pub mod plugin_resources;
pub mod process;
pub mod registry;
pub mod scaffold;
pub mod sharding;
pub mod support;
