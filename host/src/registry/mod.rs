//! Plugins by OCI reference: pushed to and pulled from registries as Wasm
//! artifacts, signed and verified the way cosign does.
//!
//! The registry is only a source of files: what is pulled lands in the
//! artifact cache under its digest and is served like any plugin file
//! (hot reload, twin rule, last good version), so a plugin from a registry
//! and one dropped into the plugins directory behave the same once here.

pub mod artifact;
pub mod artifact_cache;
pub mod bounded_reads;
pub mod client;
mod content_digest;
pub mod credentials;
pub mod error;
pub mod fetch;
pub mod options;
pub mod reference;
pub mod served_files;
pub mod signatures;
pub mod trust;

pub use artifact_cache::ArtifactCache;
pub use client::RegistryClient;
pub use credentials::Credentials;
pub use error::RegistryError;
pub use options::RegistryOptions;
pub use reference::{Digest, PluginReference};
pub use signatures::{Signer, TrustPolicy, TrustedKey, VerifyError};
