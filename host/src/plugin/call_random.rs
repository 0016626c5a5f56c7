//! The randomness one call sees: WASI `random`, `insecure` and
//! `insecure-seed`, each a stream derived from the plugin and the object.
//!
//! A Rust plugin reaches for randomness without asking: every `HashMap`
//! seeds itself from `insecure-seed`, so iterating one gives a different
//! order every call. A plugin whose output depends on that order (a list
//! built from a map) would make `simulate` print something else every run,
//! and would make a real host apply a "changed" object on every reconcile.
//! So the streams are a function of:
//! - a key: fixed in `simulate` and `test`, so runs repeat exactly; in `run`
//!   and `dev` drawn from the OS when the host starts, so the bytes are as
//!   unpredictable from outside as the OS's own (a plugin may derive a
//!   password from `random`) and still the same for every retry of one
//!   object version within one host process;
//! - the plugin's content hash;
//! - what the call is about ([`CallSubject`]). For a reconcile, the object:
//!   its namespace and name, uid and generation. Another object, or a new
//!   spec of this one, gets another stream. Not its resourceVersion: every
//!   status write changes that, so a plugin whose status depends on the
//!   stream would write a new status on every reconcile and never settle
//!   (`simulate` saw exactly that). For an admission call, the request: a
//!   created object has no uid or generation yet, so a defaulting plugin
//!   that draws a name suffix or a token would otherwise give every object
//!   the same one; the API server's request uid tells requests apart and is
//!   the same when it calls a webhook again for the same request.
//!
//! Each stream is ChaCha12 seeded with SHA-256 of those, under a label per
//! interface, so no stream can be computed from another.

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// What makes a host's streams its own. Never printed or logged.
#[derive(Clone)]
pub struct RandomKey([u8; 32]);

impl RandomKey {
    /// The key of `simulate` and `test`: the same streams on every run.
    pub fn fixed() -> Self {
        Self([0; 32])
    }

    /// A key drawn from the OS, for hosts serving a real cluster.
    pub fn secret() -> Self {
        Self(rand::random())
    }
}

impl std::fmt::Debug for RandomKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.0 == [0; 32] { "fixed" } else { "secret" };
        write!(f, "RandomKey({kind})")
    }
}

/// The object a call is about, as far as its randomness goes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ObjectVersion {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `metadata.generation`: moves with the spec, not with the status.
    pub generation: i64,
}

impl ObjectVersion {
    /// From the primary's JSON; an object that does not parse (it always
    /// does: the host wrote it) counts as one with empty fields.
    pub(crate) fn of_primary(primary: &str) -> Self {
        let metadata = metadata_of(primary).unwrap_or_default();
        Self {
            namespace: metadata.namespace,
            name: metadata.name,
            uid: metadata.uid,
            generation: metadata.generation,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Metadata {
    namespace: String,
    name: String,
    uid: String,
    generation: i64,
}

/// The top-level `metadata` of a JSON object, read without going through
/// the rest: this runs on every call, and a primary's spec and status can
/// be kilobytes (parsing a whole 10 KB primary costs about as much as a
/// quarter of a call). Only the members before `metadata` are skipped;
/// the host writes `apiVersion` and `kind` first.
fn metadata_of(json: &str) -> Option<Metadata> {
    let mut rest = json.trim_start().strip_prefix('{')?;
    loop {
        let (key, used) = one::<String>(rest)?;
        rest = rest[used..].trim_start().strip_prefix(':')?;
        if key == "metadata" {
            return one::<Metadata>(rest).map(|(metadata, _)| metadata);
        }
        let (_, used) = one::<serde::de::IgnoredAny>(rest)?;
        rest = rest[used..].trim_start().strip_prefix(',')?;
    }
}

/// The first JSON value of `text`, and how many bytes it took.
fn one<T: serde::de::DeserializeOwned>(text: &str) -> Option<(T, usize)> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, values.byte_offset()))
}

/// What one call is about, as far as its randomness goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CallSubject<'a> {
    /// Loading the plugin: `metadata` and the admission declaration.
    Load,
    /// A reconcile of this object version.
    Object(&'a ObjectVersion),
    /// An admission request, by its uid.
    Admission(&'a str),
}

/// The three WASI random sources of one call.
pub(crate) struct CallRandom {
    pub secure: StdRng,
    pub insecure: StdRng,
    pub insecure_seed: u128,
}

impl CallRandom {
    /// The streams for `subject` of the plugin whose content hash is
    /// `plugin_sha256`.
    pub(crate) fn new(key: &RandomKey, plugin_sha256: &str, subject: CallSubject<'_>) -> Self {
        let seed = |label: &str| -> [u8; 32] {
            let mut h = Sha256::new();
            h.update(b"reconciler-host call random v1\0");
            h.update(key.0);
            for part in [label, plugin_sha256] {
                h.update(part.as_bytes());
                h.update([0]);
            }
            // Length-prefixed parts: no two subjects share an encoding.
            let part = |h: &mut Sha256, part: &str| {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            };
            match subject {
                CallSubject::Object(o) => {
                    for p in [&o.namespace, &o.name, &o.uid] {
                        part(&mut h, p);
                    }
                    h.update(o.generation.to_le_bytes());
                }
                CallSubject::Load => h.update(b"metadata"),
                CallSubject::Admission(uid) => {
                    h.update(b"admission\0");
                    part(&mut h, uid);
                }
            }
            h.finalize().into()
        };
        let seed_bytes = seed("insecure-seed");
        let mut insecure_seed = [0u8; 16];
        insecure_seed.copy_from_slice(&seed_bytes[..16]);
        Self {
            secure: StdRng::from_seed(seed("random")),
            insecure: StdRng::from_seed(seed("insecure")),
            insecure_seed: u128::from_le_bytes(insecure_seed),
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    fn object(uid: &str, generation: i64) -> ObjectVersion {
        ObjectVersion {
            namespace: "default".into(),
            name: "a".into(),
            uid: uid.into(),
            generation,
        }
    }

    fn first(key: &RandomKey, sha: &str, o: Option<&ObjectVersion>) -> (u64, u64, u128) {
        first_of(key, sha, o.map_or(CallSubject::Load, CallSubject::Object))
    }

    fn first_of(key: &RandomKey, sha: &str, subject: CallSubject<'_>) -> (u64, u64, u128) {
        let mut r = CallRandom::new(key, sha, subject);
        (r.secure.next_u64(), r.insecure.next_u64(), r.insecure_seed)
    }

    #[test]
    fn the_same_plugin_and_object_generation_get_the_same_streams() {
        let o = object("u1", 7);
        assert_eq!(
            first(&RandomKey::fixed(), "abc", Some(&o)),
            first(&RandomKey::fixed(), "abc", Some(&o))
        );
    }

    #[test]
    fn anything_else_gets_other_streams() {
        let key = RandomKey::fixed();
        let base = first(&key, "abc", Some(&object("u1", 7)));
        for other in [
            first(&key, "abd", Some(&object("u1", 7))),
            first(&key, "abc", Some(&object("u2", 7))),
            first(&key, "abc", Some(&object("u1", 8))),
            first(&key, "abc", None),
            first(&RandomKey::secret(), "abc", Some(&object("u1", 7))),
        ] {
            assert_ne!(base.0, other.0);
            assert_ne!(base.1, other.1);
            assert_ne!(base.2, other.2);
        }
    }

    #[test]
    fn each_admission_request_gets_its_own_streams_and_a_repeat_the_same() {
        let key = RandomKey::fixed();
        let a = first_of(&key, "abc", CallSubject::Admission("uid-a"));
        let b = first_of(&key, "abc", CallSubject::Admission("uid-b"));
        assert_ne!(a, b, "two requests draw different suffixes");
        assert_eq!(a, first_of(&key, "abc", CallSubject::Admission("uid-a")));
        assert_ne!(a, first(&key, "abc", None), "not the load's streams");
    }

    #[test]
    fn the_streams_differ_from_each_other() {
        let (secure, insecure, seed) = first(&RandomKey::fixed(), "abc", None);
        assert_ne!(secure, insecure);
        assert_ne!(u128::from(secure), seed);
    }

    #[test]
    fn an_object_is_read_from_the_primary() {
        let primary = r#"{"apiVersion":"v1","kind":"X","metadata":{"name":"a","namespace":"default","uid":"u1","resourceVersion":"9","generation":7},"spec":{}}"#;
        assert_eq!(ObjectVersion::of_primary(primary), object("u1", 7));
        assert_eq!(
            ObjectVersion::of_primary("not json"),
            ObjectVersion::default()
        );
    }

    #[test]
    fn only_the_top_level_metadata_counts_wherever_it_is() {
        let late = r#" { "spec" : {"template": {"metadata": {"uid": "inner"}}, "n": 1},
            "kind": "X", "metadata": {"name": "a", "namespace": "default", "uid": "u1", "generation": 7} }"#;
        assert_eq!(ObjectVersion::of_primary(late), object("u1", 7));
        let none = r#"{"kind": "X", "spec": {"metadata": {"uid": "inner"}}}"#;
        assert_eq!(ObjectVersion::of_primary(none), ObjectVersion::default());
        let escaped = r#"{"k\"ey": "v\"", "metadata": {"name": "a", "namespace": "default", "uid": "u1", "generation": 7}}"#;
        assert_eq!(ObjectVersion::of_primary(escaped), object("u1", 7));
    }
}
