//! The digest a registry names bytes by, computed here: manifests,
//! signature layers and cache entries are all checked against what their
//! bytes hash to, never against what a header says.

use sha2::Digest as _;

/// `bytes` in lowercase hex, as digests and cache entry names spell them.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `sha256:<hex>` of `bytes`: the digest a registry names them by.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&sha2::Sha256::digest(bytes)))
}
