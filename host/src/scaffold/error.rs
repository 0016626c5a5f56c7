//! What can stop `new`: each error says what to give instead, since the
//! one reading it is starting a project, not debugging the host.

use std::path::PathBuf;

use thiserror::Error;

use super::render::RenderError;

#[derive(Debug, Error)]
pub enum ScaffoldError {
    #[error(
        "{0:?} is not a plugin name: use lowercase letters, digits and '-', starting with a letter, at most 63 (e.g. widget-operator)"
    )]
    Name(String),
    #[error(
        "{given:?} is not GROUP/VERSION/KIND: {why} (e.g. example.com/v1alpha1/Widget, apps/v1/Deployment, or v1/ConfigMap for the core group)"
    )]
    Kind { given: String, why: &'static str },
    #[error("--cluster-scoped is for custom kinds: {kind} is served {scope} by every API server")]
    BuiltinScope { kind: String, scope: &'static str },
    #[error(
        "{0} is not a reconciler-host checkout (no plugins/sdk, sdk-python, sdk-js and wit/ there): give --sdk the directory of your clone"
    )]
    NotACheckout(PathBuf),
    #[error("cannot read the SDK's pinned versions from {path}: {why}")]
    Pins { path: PathBuf, why: String },
    #[error(
        "{0} exists and is not empty: new writes a fresh directory (choose another NAME or --dir, or remove it)"
    )]
    Exists(PathBuf),
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the host's template {template} is broken")]
    Template {
        template: &'static str,
        source: RenderError,
    },
}
