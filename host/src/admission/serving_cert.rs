//! The webhook server's certificate.
//!
//! The API server calls webhooks over HTTPS and checks the server's
//! certificate against the `caBundle` of the webhook configuration. Two
//! ways to get one:
//! - user-supplied: a certificate and key in files, such as cert-manager's
//!   Secret mounted into the pod (`tls.crt`, `tls.key`, and `ca.crt` for the
//!   bundle); renewing it is cert-manager's job;
//! - generated: a small CA and a serving certificate signed by it for the
//!   webhook's names, valid for [`CERT_VALIDITY`], kept in a Secret shared
//!   by every replica and renewed through it ahead of expiry
//!   (`cert_secret.rs`).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// How long a generated CA and serving certificate are valid. A year: long
/// enough that renewal is rare, short enough that a leaked key does not
/// stay useful for decades.
pub const CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A generated certificate is renewed once it has less than this left:
/// months in which a host that cannot renew (no access to its Secret) has
/// its warnings seen before the API server stops trusting it.
pub const RENEW_BEFORE: Duration = Duration::from_secs(90 * 24 * 3600);
/// A generated certificate starts to be valid this long before it is made,
/// so an API server whose clock runs behind the host's accepts it at once.
const BACKDATE: Duration = Duration::from_secs(3600);

/// A serving certificate and what clients must trust to accept it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
    /// The CA certificate(s), PEM: the webhook configurations' caBundle.
    pub ca_bundle_pem: String,
}

/// What a stored certificate needs, judged against the names it must carry
/// and the time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertHealth {
    /// Valid for the names, and not due for renewal.
    Good,
    /// Valid for the names, but expiring within [`RENEW_BEFORE`].
    Renew,
    /// Unusable (unreadable, expired, not yet valid, or missing a name):
    /// replace it at once. The reason is for the log.
    Replace(String),
}

impl ServingCert {
    /// A new CA and a serving certificate for `names` (DNS names or IP
    /// addresses), valid from now for [`CERT_VALIDITY`].
    pub fn generate(names: &[String]) -> anyhow::Result<Self> {
        Self::generate_valid(names, SystemTime::now(), CERT_VALIDITY)
    }

    /// [`Self::generate`] made at `now`, valid for `validity`: the CA and
    /// the serving certificate expire together.
    pub fn generate_valid(
        names: &[String],
        now: SystemTime,
        validity: Duration,
    ) -> anyhow::Result<Self> {
        let not_before = offset_date_time(now.checked_sub(BACKDATE).unwrap_or(UNIX_EPOCH))?;
        let not_after = offset_date_time(now + validity)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "reconciler-host admission CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca_params.not_before = not_before;
        ca_params.not_after = not_after;
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca = Issuer::new(ca_params, ca_key);

        let mut params = CertificateParams::new(names.to_vec())
            .context("the webhook's names must be DNS names or IP addresses")?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_bundle_pem: ca_cert.pem(),
        })
    }

    /// A user-supplied certificate and key; the bundle is `ca` when given
    /// (cert-manager's `ca.crt`), else the certificate itself.
    pub fn from_files(cert: &Path, key: &Path, ca: Option<&Path>) -> anyhow::Result<Self> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
        };
        let cert_pem = read(cert)?;
        let ca_bundle_pem = match ca {
            Some(ca) => read(ca)?,
            None => cert_pem.clone(),
        };
        Ok(Self {
            key_pem: read(key)?,
            cert_pem,
            ca_bundle_pem,
        })
    }

    /// Whether this certificate can keep serving `names` at `now`.
    pub fn health(&self, names: &[String], now: SystemTime) -> CertHealth {
        let leaf = match first_certificate(&self.cert_pem) {
            Ok(der) => der,
            Err(e) => return CertHealth::Replace(format!("{e:#}")),
        };
        let parsed = match x509_parser::parse_x509_certificate(&leaf) {
            Ok((_, parsed)) => parsed,
            Err(e) => return CertHealth::Replace(format!("tls.crt is not a certificate: {e}")),
        };
        let now = unix_seconds(now);
        let validity = parsed.validity();
        let (from, until) = (
            validity.not_before.timestamp(),
            validity.not_after.timestamp(),
        );
        if now < from || now >= until {
            return CertHealth::Replace(format!(
                "it is valid only from {} to {} (unix seconds), now is {now}",
                from, until
            ));
        }
        let carried = carried_names(&parsed);
        if let Some(missing) = names.iter().find(|n| !carried.iter().any(|c| c.covers(n))) {
            return CertHealth::Replace(format!(
                "it does not name {missing}, which the API server calls"
            ));
        }
        if until - now < RENEW_BEFORE.as_secs() as i64 {
            return CertHealth::Renew;
        }
        CertHealth::Good
    }

    /// The moment this certificate stops being valid, if it can be read.
    pub fn not_after(&self) -> Option<SystemTime> {
        let leaf = first_certificate(&self.cert_pem).ok()?;
        let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).ok()?;
        let secs = u64::try_from(parsed.validity().not_after.timestamp()).ok()?;
        Some(UNIX_EPOCH + Duration::from_secs(secs))
    }
}

/// A CA bundle (PEM) of `new_ca` first, then those certificates of
/// `old_bundle` still valid at `now`: while replicas switch from the old
/// serving certificate to the new one, the API server trusts both.
pub fn bundle_with(new_ca: &str, old_bundle: &str, now: SystemTime) -> String {
    let now = unix_seconds(now);
    let mut bundle = new_ca.trim_end().to_string();
    bundle.push('\n');
    let new_ders: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(new_ca.as_bytes())
        .flatten()
        .map(|d| d.to_vec())
        .collect();
    for der in CertificateDer::pem_slice_iter(old_bundle.as_bytes()).flatten() {
        let still_valid = x509_parser::parse_x509_certificate(&der)
            .is_ok_and(|(_, c)| c.validity().not_after.timestamp() > now);
        if still_valid && !new_ders.iter().any(|n| n.as_slice() == der.as_ref()) {
            bundle.push_str(&pem_of(&der));
        }
    }
    bundle
}

fn pem_of(der: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// The first certificate of a PEM text, DER.
pub(crate) fn first_certificate(pem: &str) -> anyhow::Result<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .context("holds no PEM certificate")?
        .context("holds a PEM certificate that does not decode")
}

/// A name a certificate carries.
enum Carried {
    Dns(String),
    Ip(std::net::IpAddr),
}

impl Carried {
    fn covers(&self, name: &str) -> bool {
        match (self, name.parse::<std::net::IpAddr>()) {
            (Carried::Ip(ip), Ok(wanted)) => *ip == wanted,
            (Carried::Dns(dns), Err(_)) => {
                let (dns, name) = (dns.to_ascii_lowercase(), name.to_ascii_lowercase());
                match dns.strip_prefix("*.") {
                    // A wildcard stands for exactly one label.
                    Some(rest) => name
                        .split_once('.')
                        .is_some_and(|(label, tail)| !label.is_empty() && tail == rest),
                    None => dns == name,
                }
            }
            _ => false,
        }
    }
}

fn carried_names(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<Carried> {
    use x509_parser::extensions::GeneralName;
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(Carried::Dns(dns.to_string())),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes)
                    .ok()
                    .map(|b| Carried::Ip(b.into())),
                16 => <[u8; 16]>::try_from(*bytes)
                    .ok()
                    .map(|b| Carried::Ip(b.into())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

fn offset_date_time(t: SystemTime) -> anyhow::Result<time::OffsetDateTime> {
    time::OffsetDateTime::from_unix_timestamp(unix_seconds(t))
        .context("a certificate date out of range")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn names() -> Vec<String> {
        vec![
            "reconciler-host.reconciler-system.svc".to_string(),
            "127.0.0.1".to_string(),
        ]
    }

    #[test]
    fn a_generated_certificate_serves_and_names_its_hosts() {
        let cert = ServingCert::generate(&names()).unwrap();
        assert!(cert.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(cert.cert_pem, cert.ca_bundle_pem, "signed by its own CA");
        cert.server_config().expect("rustls accepts it");
        assert_eq!(cert.health(&names(), SystemTime::now()), CertHealth::Good);
    }

    #[test]
    fn a_generated_certificate_expires_after_its_validity() {
        let now = SystemTime::now();
        let cert = ServingCert::generate(&names()).unwrap();
        let left = cert
            .not_after()
            .unwrap()
            .duration_since(now)
            .expect("in the future");
        assert!(
            left <= CERT_VALIDITY && left > CERT_VALIDITY - DAY,
            "{left:?} left"
        );
        let late = now + CERT_VALIDITY - RENEW_BEFORE + DAY;
        assert_eq!(cert.health(&names(), late), CertHealth::Renew);
        let expired = now + CERT_VALIDITY + DAY;
        assert!(matches!(
            cert.health(&names(), expired),
            CertHealth::Replace(why) if why.contains("valid only from")
        ));
    }

    #[test]
    fn a_certificate_without_a_name_the_api_server_calls_is_replaced() {
        let cert = ServingCert::generate(&["old.example.svc".to_string()]).unwrap();
        match cert.health(&names(), SystemTime::now()) {
            CertHealth::Replace(why) => {
                assert!(
                    why.contains("reconciler-host.reconciler-system.svc"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        let garbage = ServingCert {
            cert_pem: "not PEM".into(),
            ..cert
        };
        assert!(matches!(
            garbage.health(&names(), SystemTime::now()),
            CertHealth::Replace(_)
        ));
        let wildcard = Carried::Dns("*.reconciler-system.svc".into());
        assert!(wildcard.covers("reconciler-host.reconciler-system.svc"));
        assert!(!wildcard.covers("a.b.reconciler-system.svc"));
    }

    #[test]
    fn a_bundle_keeps_the_old_cas_until_they_expire() {
        let now = SystemTime::now();
        let old = ServingCert::generate_valid(&names(), now - 300 * DAY, 310 * DAY).unwrap();
        let gone = ServingCert::generate_valid(&names(), now - 30 * DAY, 20 * DAY).unwrap();
        let new = ServingCert::generate(&names()).unwrap();
        let old_bundle = format!("{}{}", old.ca_bundle_pem, gone.ca_bundle_pem);
        let bundle = bundle_with(&new.ca_bundle_pem, &old_bundle, now);
        let ders: Vec<_> = CertificateDer::pem_slice_iter(bundle.as_bytes())
            .map(|d| d.unwrap())
            .collect();
        assert_eq!(ders.len(), 2, "the new CA and the old one still valid");
        assert_eq!(ders[0], first_certificate(&new.ca_bundle_pem).unwrap());
        assert_eq!(ders[1], first_certificate(&old.ca_bundle_pem).unwrap());
        assert_eq!(
            bundle_with(&new.ca_bundle_pem, &bundle, now),
            bundle,
            "applying it again changes nothing"
        );
    }
}
