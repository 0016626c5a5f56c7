//! `reconciler-host new`: a plugin project from nothing, in Rust, Python or
//! JavaScript, that builds and passes its first golden case as written.
//!
//! What a project holds: the plugin's source with its metadata filled in, a
//! native test, a CRD for a custom kind, an example object, golden cases
//! (one of the reconcile, and with admission one per stub), and a README
//! whose commands (test, build, golden cases) are the ones `scripts/check-new`
//! runs. The templates are files under `templates/`, rendered by
//! [`render`]; the pinned tool versions come from the SDK checkout the
//! project uses, so a project never pins other versions than the SDK's.
//!
//! The parts: `names.rs` (the plugin's and its kind's names), `checkout.rs`
//! (the SDK checkout), `language.rs` and `template_set.rs` (which templates
//! go where), `project.rs` (the project: its values, files and writing),
//! `error.rs`. This file only names them; none of them uses anything of it.

mod checkout;
mod error;
mod language;
mod names;
mod project;
pub mod render;
mod template_set;

pub use checkout::Checkout;
pub use error::ScaffoldError;
pub use language::Language;
pub use names::{PluginName, is_builtin_group, parse_kind, plural_of};
pub use project::Scaffold;
