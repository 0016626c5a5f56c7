//! reconciler-host: a Kubernetes controller host whose reconcile decisions
//! run as sandboxed WebAssembly components.
//!
//! - [`plugin`]: load components, run each reconcile in a fresh sandboxed
//!   instance, validate what comes back.
//! - [`golden`]: golden cases (`reconciler-host test`) against a compiled plugin.
//! - [`cli`]: the `reconciler-host` command line.

pub mod admission;
pub mod api_client;
pub mod background_reload;
pub mod cli;
pub mod cluster;
pub mod connection_slots;
pub mod crd_install;
pub mod dev;
pub mod dir_watch;
pub mod dispatch;
pub mod engine;
pub mod fleet;
pub mod golden;
pub mod heap_trim;
pub mod hot_reload;
pub mod http_server;
pub mod leader_election;
pub mod main_task;
pub mod manifests;
pub mod metrics;
pub mod metrics_auth;
pub mod metrics_server;
pub mod plugin;
pub mod plugin_resources;
pub mod rbac;
pub mod registry;
pub mod run;
pub mod simulate;
pub mod tls_serving;
