//! How the host reaches registries: the settings every registry request
//! is made with, apart from the client that makes it, so the bounded
//! reader, the client and the signature check share them without
//! depending on each other.

use std::time::Duration;

use super::credentials::Credentials;

/// The largest plugin pulled unless `--registry-max-mib` says otherwise:
/// the Python podset is about 19 MB, so this leaves room for plugins in
/// heavier languages without letting a registry fill the disk.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// How long any one registry request may take unless
/// `--registry-timeout-secs` says otherwise: a 256 MiB layer at about
/// 1 MiB/s, and far longer than a manifest or a signature needs.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How the host reaches registries.
#[derive(Clone, Debug)]
pub struct RegistryOptions {
    /// PEM certificates trusted beside the system's roots (`--registry-ca`).
    pub extra_ca_pem: Vec<Vec<u8>>,
    /// `HOST:PORT`s reached over plain HTTP (`--insecure-registry`).
    pub insecure: Vec<String>,
    /// Credentials from the user's docker config.
    pub credentials: Credentials,
    /// The largest component pulled, in bytes.
    pub max_bytes: u64,
    /// How long any one request (a manifest, a signature, a layer) may
    /// take, from its start to its last byte.
    pub timeout: Duration,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        Self {
            extra_ca_pem: Vec::new(),
            insecure: Vec::new(),
            credentials: Credentials::default(),
            max_bytes: DEFAULT_MAX_BYTES,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}
