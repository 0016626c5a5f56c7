//! The generated serving certificate, kept in one Secret that every replica
//! reads, and renewed through it.
//!
//! The Secret holds `tls.crt` and `tls.key` (what every replica serves) and
//! `ca.crt` (the caBundle every replica puts in the webhook configurations).
//! Each replica applies the bundle it read from the Secret, never one of its
//! own making, so replicas agree on it instead of overwriting each other's.
//!
//! Renewal must never leave the API server with a certificate it does not
//! trust, whichever replica it calls. So it happens in two steps:
//!   1. a certificate due for renewal gets a successor, stored beside it
//!      (`next.crt`, `next.key`, and when in an annotation), and the new CA
//!      joins the old one in `ca.crt`; replicas keep serving the old one
//!      and, at their next resync, apply the bundle of both CAs;
//!   2. once every replica has had time to apply that bundle (three resync
//!      periods), the successor replaces the serving certificate; replicas
//!      switch to it at their next resync, and both are trusted meanwhile.
//!
//! A certificate that cannot serve at all (expired, unreadable, missing a
//! name the API server calls) is replaced in one step: there is nothing to
//! keep serving. Every write carries the resourceVersion it was computed
//! from, so of two replicas renewing at once, one wins and the other takes
//! its result.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

use super::serving_cert::{CertHealth, ServingCert, bundle_with};

/// Key names in the Secret, as cert-manager and kubernetes.io/tls use them.
const CERT_KEY: &str = "tls.crt";
const KEY_KEY: &str = "tls.key";
const CA_KEY: &str = "ca.crt";
/// The successor of the serving certificate during a renewal.
const NEXT_CERT_KEY: &str = "next.crt";
const NEXT_KEY_KEY: &str = "next.key";
/// When the successor was stored (unix seconds).
pub const NEXT_SINCE_ANNOTATION: &str = "reconciler-host.io/next-certificate-since";

/// What the Secret holds, as far as serving goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCert {
    /// The certificate served, with the bundle the configurations carry.
    pub serving: ServingCert,
    /// The successor during a renewal, and since when (unix seconds).
    pub next: Option<(ServingCert, u64)>,
}

/// What to do with what is stored.
#[derive(Debug, PartialEq, Eq)]
pub enum CertStep {
    /// Nothing: keep serving it.
    Keep,
    /// Store this instead; the reason is for the log.
    Write(StoredCert, String),
}

/// The next step for `stored` (none: there is no Secret yet), for a host
/// that must serve `names`, at `now`, when replicas have taken up a new
/// bundle within `settle`.
pub fn next_step(
    stored: Option<&StoredCert>,
    names: &[String],
    now: SystemTime,
    settle: Duration,
) -> anyhow::Result<CertStep> {
    let Some(stored) = stored else {
        return Ok(CertStep::Write(
            StoredCert {
                serving: ServingCert::generate(names)?,
                next: None,
            },
            "generated the admission certificate".into(),
        ));
    };
    let now_secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let health = stored.serving.health(names, now);
    match health {
        CertHealth::Replace(why) => {
            let new = ServingCert::generate(names)?;
            let ca_bundle_pem = bundle_with(&new.ca_bundle_pem, &stored.serving.ca_bundle_pem, now);
            Ok(CertStep::Write(
                StoredCert {
                    serving: ServingCert {
                        ca_bundle_pem,
                        ..new
                    },
                    next: None,
                },
                format!("replaced the admission certificate: {why}"),
            ))
        }
        CertHealth::Renew | CertHealth::Good => match &stored.next {
            Some((next, since)) if now_secs.saturating_sub(*since) >= settle.as_secs() => {
                Ok(CertStep::Write(
                    StoredCert {
                        serving: ServingCert {
                            ca_bundle_pem: stored.serving.ca_bundle_pem.clone(),
                            ..next.clone()
                        },
                        next: None,
                    },
                    "now serving the renewed admission certificate (its CA and the previous one are both trusted)".into(),
                ))
            }
            Some(_) => Ok(CertStep::Keep),
            None if health == CertHealth::Renew => {
                let next = ServingCert::generate(names)?;
                let ca_bundle_pem =
                    bundle_with(&next.ca_bundle_pem, &stored.serving.ca_bundle_pem, now);
                Ok(CertStep::Write(
                    StoredCert {
                        serving: ServingCert {
                            ca_bundle_pem: ca_bundle_pem.clone(),
                            ..stored.serving.clone()
                        },
                        next: Some((
                            ServingCert {
                                ca_bundle_pem,
                                ..next
                            },
                            now_secs,
                        )),
                    },
                    format!(
                        "renewing the admission certificate ahead of its expiry: its successor is served in {} s, once every replica trusts its CA",
                        settle.as_secs()
                    ),
                ))
            }
            None => Ok(CertStep::Keep),
        },
    }
}

/// The Secret `namespace/name` holding the generated certificate.
pub struct CertSecret {
    api: Api<Secret>,
    namespace: String,
    name: String,
    names: Vec<String>,
    settle: Duration,
}

impl CertSecret {
    /// The certificate for `names` in Secret `namespace/name`; a renewal's
    /// successor is served after `settle` (every replica's resync must fit
    /// in it).
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        names: &[String],
        settle: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            names: names.to_vec(),
            settle,
        }
    }

    /// Reads the Secret, takes the step it needs (creating it, renewing,
    /// replacing), and returns what to serve now.
    pub async fn sync(&self) -> anyhow::Result<ServingCert> {
        let (namespace, name) = (&self.namespace, &self.name);
        let existing = self.api.get_opt(name).await.with_context(|| {
            format!("cannot read the admission certificate Secret {namespace}/{name}")
        })?;
        let stored = existing
            .as_ref()
            .map(stored_of)
            .transpose()
            .with_context(|| format!("Secret {namespace}/{name}"))?;
        let step = next_step(stored.as_ref(), &self.names, SystemTime::now(), self.settle)?;
        let CertStep::Write(new, why) = step else {
            return Ok(stored
                .map(|s| s.serving)
                .expect("Keep needs a stored certificate"));
        };
        let written = match &existing {
            None => {
                self.api
                    .create(
                        &PostParams::default(),
                        &secret_of(&new, namespace, name, None)?,
                    )
                    .await
            }
            Some(old) => {
                let version = old.metadata.resource_version.clone();
                self.api
                    .replace(
                        name,
                        &PostParams::default(),
                        &secret_of(&new, namespace, name, version)?,
                    )
                    .await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = %format!("{namespace}/{name}"), "{why}");
                Ok(new.serving)
            }
            // Another replica wrote first: serve what it wrote.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let winner = self.api.get(name).await.with_context(|| {
                    format!("cannot read the admission certificate Secret {namespace}/{name}")
                })?;
                Ok(stored_of(&winner)
                    .with_context(|| format!("Secret {namespace}/{name}"))?
                    .serving)
            }
            Err(e) => Err(e).with_context(|| {
                format!(
                    "cannot write the admission certificate Secret {namespace}/{name} (the host's Role needs create and update on it)"
                )
            }),
        }
    }
}

fn stored_of(secret: &Secret) -> anyhow::Result<StoredCert> {
    let data = secret.data.clone().unwrap_or_default();
    let text = |key: &str| -> Option<anyhow::Result<String>> {
        data.get(key).map(|ByteString(bytes)| {
            String::from_utf8(bytes.clone()).with_context(|| format!("{key} is not PEM text"))
        })
    };
    let required = |key: &str| -> anyhow::Result<String> {
        text(key).with_context(|| format!("has no {key}: delete it to have it generated again"))?
    };
    let cert_pem = required(CERT_KEY)?;
    let ca_bundle_pem = text(CA_KEY)
        .transpose()?
        .unwrap_or_else(|| cert_pem.clone());
    let since = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NEXT_SINCE_ANNOTATION))
        .and_then(|s| s.parse::<u64>().ok());
    let next = match (text(NEXT_CERT_KEY), text(NEXT_KEY_KEY), since) {
        (Some(cert), Some(key), Some(since)) => Some((
            ServingCert {
                cert_pem: cert?,
                key_pem: key?,
                ca_bundle_pem: ca_bundle_pem.clone(),
            },
            since,
        )),
        _ => None,
    };
    Ok(StoredCert {
        serving: ServingCert {
            key_pem: required(KEY_KEY)?,
            cert_pem,
            ca_bundle_pem,
        },
        next,
    })
}

fn secret_of(
    stored: &StoredCert,
    namespace: &str,
    name: &str,
    resource_version: Option<String>,
) -> anyhow::Result<Secret> {
    let mut data = BTreeMap::from([
        (CERT_KEY, stored.serving.cert_pem.clone()),
        (KEY_KEY, stored.serving.key_pem.clone()),
        (CA_KEY, stored.serving.ca_bundle_pem.clone()),
    ]);
    let mut annotations = BTreeMap::new();
    if let Some((next, since)) = &stored.next {
        data.insert(NEXT_CERT_KEY, next.cert_pem.clone());
        data.insert(NEXT_KEY_KEY, next.key_pem.clone());
        annotations.insert(NEXT_SINCE_ANNOTATION, since.to_string());
    }
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version,
            "labels": {"app.kubernetes.io/managed-by": "reconciler-host"},
            "annotations": annotations},
        "stringData": data,
    }))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);
    const SETTLE: Duration = Duration::from_secs(180);

    fn names() -> Vec<String> {
        vec!["127.0.0.1".to_string()]
    }

    fn stored(cert: ServingCert) -> StoredCert {
        StoredCert {
            serving: cert,
            next: None,
        }
    }

    fn cas(bundle: &str) -> usize {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        CertificateDer::pem_slice_iter(bundle.as_bytes()).count()
    }

    #[test]
    fn a_good_certificate_is_kept_and_a_missing_one_generated() {
        let now = SystemTime::now();
        let good = stored(ServingCert::generate(&names()).unwrap());
        assert_eq!(
            next_step(Some(&good), &names(), now, SETTLE).unwrap(),
            CertStep::Keep
        );
        assert!(matches!(
            next_step(None, &names(), now, SETTLE).unwrap(),
            CertStep::Write(StoredCert { next: None, .. }, _)
        ));
    }

    #[test]
    fn renewal_trusts_both_cas_before_serving_the_successor() {
        let start = SystemTime::now();
        let old =
            stored(ServingCert::generate_valid(&names(), start - 300 * DAY, 310 * DAY).unwrap());
        let CertStep::Write(staged, _) = next_step(Some(&old), &names(), start, SETTLE).unwrap()
        else {
            panic!("a certificate ten days from expiry is renewed");
        };
        assert_eq!(
            staged.serving.cert_pem, old.serving.cert_pem,
            "still serving the old one"
        );
        assert_eq!(
            cas(&staged.serving.ca_bundle_pem),
            2,
            "both CAs are trusted"
        );
        let (next, _) = staged.next.clone().expect("a successor");
        assert_ne!(next.cert_pem, old.serving.cert_pem);

        assert_eq!(
            next_step(Some(&staged), &names(), start + SETTLE / 2, SETTLE).unwrap(),
            CertStep::Keep,
            "replicas have not all taken up the bundle yet"
        );
        let CertStep::Write(promoted, _) =
            next_step(Some(&staged), &names(), start + SETTLE, SETTLE).unwrap()
        else {
            panic!("the successor is served once replicas had time");
        };
        assert_eq!(promoted.serving.cert_pem, next.cert_pem);
        assert_eq!(promoted.serving.ca_bundle_pem, staged.serving.ca_bundle_pem);
        assert_eq!(promoted.next, None);
        assert_eq!(
            next_step(Some(&promoted), &names(), start + SETTLE, SETTLE).unwrap(),
            CertStep::Keep
        );
    }

    #[test]
    fn a_certificate_that_cannot_serve_is_replaced_at_once() {
        let now = SystemTime::now();
        for (cert, why) in [
            (
                ServingCert::generate(&["elsewhere.example".to_string()]).unwrap(),
                "does not name 127.0.0.1",
            ),
            (
                ServingCert::generate_valid(&names(), now - 400 * DAY, 365 * DAY).unwrap(),
                "valid only",
            ),
        ] {
            let CertStep::Write(new, said) =
                next_step(Some(&stored(cert.clone())), &names(), now, SETTLE).unwrap()
            else {
                panic!("{why}: kept");
            };
            assert!(said.contains(why), "{said}");
            assert_ne!(new.serving.cert_pem, cert.cert_pem);
            assert_eq!(new.serving.health(&names(), now), CertHealth::Good);
        }
    }

    #[test]
    fn the_secret_round_trips() {
        let now = SystemTime::now();
        let old =
            stored(ServingCert::generate_valid(&names(), now - 300 * DAY, 310 * DAY).unwrap());
        let CertStep::Write(staged, _) = next_step(Some(&old), &names(), now, SETTLE).unwrap()
        else {
            panic!("renewed");
        };
        let mut secret = secret_of(&staged, "ns", "tls", None).unwrap();
        // What the API server returns: stringData as data.
        let data = secret.string_data.take().unwrap_or_default();
        secret.data = Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        );
        assert_eq!(stored_of(&secret).unwrap(), staged);
    }
}
