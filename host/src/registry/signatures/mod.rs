//! Cosign signatures: making them on push and checking them before a
//! plugin runs.
//!
//! A signature is cosign's for key pairs: the simple-signing payload (the
//! manifest digest it vouches for, under `critical.image`), signed with
//! ECDSA P-256 over SHA-256, stored as a layer of the manifest tagged
//! `sha256-<hex>.sig` in the plugin's repository. So `cosign verify --key`
//! accepts what `reconciler-host push --sign-key` makes, and the host
//! accepts what `cosign sign --key` makes. Keyless signatures (a Fulcio
//! certificate and a Rekor bundle in the layer's annotations) are checked
//! against a trust root given as files: nothing is fetched from the public
//! Sigstore instance, so an air-gapped cluster verifies as any other.
//!
//! The payload names the digest; a layer whose payload names another is
//! ignored, so a signature made for one build never vouches for another
//! pushed under the same tag.
//!
//! The signature manifest and its layers are read here, capped (at most
//! [`MAX_SIGNATURES`] layers of at most [`MAX_SIGNATURE_BYTES`] each) and
//! within the request deadline, rather than by sigstore's client, which
//! pulls whatever the manifest lists into memory. Keys are checked on
//! those layers. Keyless identities still need sigstore's own read (it
//! checks the certificate chain and Rekor bundle as it builds its layers);
//! it runs only once the capped read has found the signatures within the
//! caps, and within the deadline, and reads from a replay of them.
//!
//! The parts: `policy.rs` (what is trusted, who signed), `layout.rs`
//! (where cosign keeps a signature), `capped_read.rs`, the `keyed.rs` and
//! `keyless.rs` checks (the latter through `replay.rs`), `verify.rs`
//! putting them together, and `sign.rs` for push. This file only names
//! them; none of them uses anything of it.

mod capped_read;
mod keyed;
mod keyless;
mod layout;
mod policy;
mod replay;
mod sign;
mod verify;
mod verify_error;

pub use capped_read::{MAX_SIGNATURE_BYTES, MAX_SIGNATURES};
pub use layout::signature_tag;
pub use policy::{KeylessIdentity, Signer, TrustPolicy, TrustRootFiles, TrustedKey};
pub use sign::{PASSWORD_ENV, generate_key_pair, sign, signing_key};
pub use verify::verify;
pub use verify_error::VerifyError;
