//! Plugin references: where in a registry a plugin is, by tag or digest.
//!
//! Written `oci://HOST/REPO:TAG` or `oci://HOST/REPO@sha256:HEX`, with
//! `registry://` accepted as Kubewarden spells it (and no scheme at all in a
//! Plugin's `spec.source`). The registry host is always explicit: a bare
//! `podset:1` would silently mean Docker Hub, which is never what a plugin
//! author meant on a cluster that may be air-gapped.

use std::fmt;

use oci_client::Reference;

/// Schemes a reference may start with.
const SCHEMES: [&str; 2] = ["oci://", "registry://"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{text:?} is not a plugin reference: {why} (write oci://HOST[:PORT]/REPO:TAG or oci://HOST[:PORT]/REPO@sha256:DIGEST)"
)]
pub struct ReferenceError {
    text: String,
    why: String,
}

/// A parsed plugin reference, registry host explicit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PluginReference {
    inner: Reference,
}

/// A manifest digest, `sha256:` and 64 lowercase hex digits: the only form
/// the host runs, caches and verifies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(hex) = text.strip_prefix("sha256:") else {
            return Err(format!(
                "digest {text:?} is not sha256 (the only algorithm accepted)"
            ));
        };
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(format!(
                "digest {text:?} does not have 64 lowercase hex digits"
            ));
        }
        Ok(Self(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// The first twelve hex digits, as logs and `kubectl get` show a digest.
    pub fn short(&self) -> &str {
        &self.hex()[..12]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `text` is written as a reference (a scheme), not a file path.
pub fn looks_like_reference(text: &str) -> bool {
    SCHEMES.iter().any(|s| text.starts_with(s))
}

impl PluginReference {
    /// A reference with a scheme, as the command line takes it.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        if !looks_like_reference(text) {
            return Err(error(text, "it does not start with oci:// or registry://"));
        }
        Self::parse_source(text)
    }

    /// A reference with or without a scheme, as a Plugin's `spec.source`.
    pub fn parse_source(text: &str) -> Result<Self, ReferenceError> {
        let rest = SCHEMES
            .iter()
            .find_map(|s| text.strip_prefix(s))
            .unwrap_or(text);
        let Some((host, path)) = rest.split_once('/') else {
            return Err(error(text, "it has no repository after the registry host"));
        };
        if host.is_empty() || !(host.contains('.') || host.contains(':') || host == "localhost") {
            return Err(error(
                text,
                &format!(
                    "{host:?} is not a registry host (a name with a dot or a port, or localhost)"
                ),
            ));
        }
        if path.is_empty() {
            return Err(error(text, "the repository is empty"));
        }
        let inner: Reference = rest.parse().map_err(|e| error(text, &format!("{e}")))?;
        if let Some(digest) = inner.digest() {
            Digest::parse(digest).map_err(|why| error(text, &why))?;
        }
        Ok(Self { inner })
    }

    pub fn registry(&self) -> &str {
        self.inner.registry()
    }

    pub fn repository(&self) -> &str {
        self.inner.repository()
    }

    pub fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }

    /// The digest the reference pins, when it has one.
    pub fn digest(&self) -> Option<Digest> {
        self.inner.digest().map(|d| Digest(d.to_string()))
    }

    /// The same repository at `digest`: what is pulled and verified.
    pub fn at_digest(&self, digest: &Digest) -> Self {
        Self {
            inner: Reference::with_digest(
                self.registry().to_string(),
                self.repository().to_string(),
                digest.as_str().to_string(),
            ),
        }
    }

    /// The same repository at `tag`.
    pub fn with_tag(&self, tag: &str) -> Self {
        Self {
            inner: Reference::with_tag(
                self.registry().to_string(),
                self.repository().to_string(),
                tag.to_string(),
            ),
        }
    }

    pub fn oci(&self) -> &Reference {
        &self.inner
    }

    /// A file name for the plugin this reference names: the repository's
    /// last segment, and a hash of the whole reference so two repositories
    /// with the same last segment do not collide.
    pub fn file_stem(&self) -> String {
        use sha2::Digest as _;
        let last = self.repository().rsplit('/').next().unwrap_or("plugin");
        let hash = sha2::Sha256::digest(self.to_string().as_bytes());
        let safe: String = last
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        format!(
            "{safe}-{:02x}{:02x}{:02x}{:02x}",
            hash[0], hash[1], hash[2], hash[3]
        )
    }
}

fn error(text: &str, why: &str) -> ReferenceError {
    ReferenceError {
        text: text.to_string(),
        why: why.to_string(),
    }
}

impl fmt::Display for PluginReference {
    /// `oci://HOST/REPO:TAG`, `oci://HOST/REPO@DIGEST` or both.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry(), self.repository())?;
        if let Some(tag) = self.tag() {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = self.inner.digest() {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for PluginReference {
    type Err = ReferenceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn tags_digests_and_both_parse_with_either_scheme() {
        let r = PluginReference::parse("oci://127.0.0.1:5000/plugins/podset:1.2").unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.tag(), r.digest()),
            ("127.0.0.1:5000", "plugins/podset", Some("1.2"), None)
        );
        let r = PluginReference::parse(&format!("registry://ghcr.io/acme/podset@sha256:{HEX}"))
            .unwrap();
        assert_eq!(r.digest().unwrap().hex(), HEX);
        assert_eq!(r.tag(), None);
        assert_eq!(
            r.to_string(),
            format!("oci://ghcr.io/acme/podset@sha256:{HEX}")
        );
        let r = PluginReference::parse(&format!("oci://localhost/podset:v1@sha256:{HEX}")).unwrap();
        assert_eq!(
            (r.tag(), r.digest().unwrap().short()),
            (Some("v1"), "0123456789ab")
        );
        let at = r.at_digest(&Digest::parse(&format!("sha256:{HEX}")).unwrap());
        assert_eq!(
            at.to_string(),
            format!("oci://localhost/podset@sha256:{HEX}")
        );
    }

    #[test]
    fn a_missing_host_scheme_or_a_bad_digest_is_refused_with_the_reason() {
        let no_scheme = PluginReference::parse("ghcr.io/acme/podset:1").unwrap_err();
        assert!(
            no_scheme.to_string().contains("oci:// or registry://"),
            "{no_scheme}"
        );
        // A spec.source may leave the scheme out.
        assert!(PluginReference::parse_source("ghcr.io/acme/podset:1").is_ok());
        let hub = PluginReference::parse("oci://acme/podset:1").unwrap_err();
        assert!(hub.to_string().contains("not a registry host"), "{hub}");
        let repo = PluginReference::parse("oci://ghcr.io").unwrap_err();
        assert!(repo.to_string().contains("no repository"), "{repo}");
        let short = PluginReference::parse("oci://ghcr.io/a/b@sha256:abc").unwrap_err();
        assert!(
            short.to_string().contains("is not a plugin reference"),
            "{short}"
        );
        let algo = format!("oci://ghcr.io/a/b@sha512:{HEX}{HEX}");
        assert!(PluginReference::parse(&algo).is_err());
    }

    #[test]
    fn file_stems_keep_the_name_and_tell_repositories_apart() {
        let a = PluginReference::parse("oci://r.example/team-a/podset:1").unwrap();
        let b = PluginReference::parse("oci://r.example/team-b/podset:1").unwrap();
        assert!(a.file_stem().starts_with("podset-"));
        assert_ne!(a.file_stem(), b.file_stem());
        assert_eq!(a.file_stem(), a.clone().file_stem());
    }
}
