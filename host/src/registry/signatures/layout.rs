//! Where and how cosign keeps a signature, as both the signing and the
//! reading side must spell it for `cosign verify` and `cosign sign` to
//! agree with the host.

use super::super::reference::Digest;

/// cosign's signature layer media type and its signature annotation.
pub(super) const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub(super) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The tag cosign keeps a digest's signatures under.
pub fn signature_tag(digest: &Digest) -> String {
    format!("sha256-{}.sig", digest.hex())
}
