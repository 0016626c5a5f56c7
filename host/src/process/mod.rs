//! Per process: what one `reconciler-host` process runs once, whatever the
//! clusters and plugins it serves. The commands' loops (`run`, `dev`,
//! `simulate`), the endpoints and their metrics, leader election, the
//! generated RBAC and deploy manifests, the Kubernetes client's settings,
//! and the process's memory and threads.

pub mod canary_files;
pub mod crd_install;
pub mod dev;
pub mod duties;
pub mod http_server;
pub mod leader_election;
pub mod main_task;
pub mod manifests;
pub mod metrics;
pub mod metrics_auth;
pub mod metrics_server;
pub mod rbac;
pub mod run;
pub mod simulate;
pub mod traces;
