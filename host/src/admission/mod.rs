//! Admission served from plugins: the same decision for objects read from
//! files (`dev`, `simulate`: [`object_gate`]) as for the API server's
//! AdmissionReviews.

pub mod cert_secret;
pub mod client_ca;
pub mod live_cert;
pub mod object_gate;
pub mod plugin_set;
pub mod review;
pub mod server;
pub mod service;
pub mod serving_cert;
pub mod shard_labels;
pub mod webhook_configs;

pub use object_gate::{GateOutcome, admit_object, admit_write};
