//! Admission served from plugins: the same decision for objects read from
//! files (`dev`, `simulate`: [`object_gate`]) as for the API server's
//! AdmissionReviews.

pub mod object_gate;

pub use object_gate::{GateOutcome, admit_object};
