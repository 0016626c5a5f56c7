//! Beneath every layer: small pieces that several layers need and that know
//! nothing of plugins, clusters or the engine. They live here rather than in
//! the highest layer that first needed them, so that no layer imports from
//! one above it (docs/layout.md).

pub mod connection_slots;
pub mod dir_watch;
pub mod duration_text;
pub mod duty_holder;
pub mod heap_trim;
pub mod panic_guard;
pub mod startup_code;
pub mod tls_serving;
