//! The webhook server's certificate.
//!
//! The API server calls webhooks over HTTPS and checks the server's
//! certificate against the `caBundle` of the webhook configuration. Two
//! ways to get one:
//! - user-supplied: a certificate and key in files, such as cert-manager's
//!   Secret mounted into the pod (`tls.crt`, `tls.key`, and `ca.crt` for the
//!   bundle);
//! - generated: a small CA and a serving certificate signed by it for the
//!   webhook's names, kept in a Secret so that every replica, and the next
//!   start, serve the same one. The first replica to start creates the
//!   Secret; the others (and later starts) read it.

use std::path::Path;

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A serving certificate and what clients must trust to accept it.
#[derive(Clone, Debug)]
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
    /// The CA certificate(s), PEM: the webhook configurations' caBundle.
    pub ca_bundle_pem: String,
}

/// Key names in the Secret, as cert-manager and kubernetes.io/tls use them.
const CERT_KEY: &str = "tls.crt";
const KEY_KEY: &str = "tls.key";
const CA_KEY: &str = "ca.crt";

impl ServingCert {
    /// A new CA and a serving certificate for `names` (DNS names or IP
    /// addresses), valid for ten years: it is rotated by deleting the
    /// Secret and restarting.
    pub fn generate(names: &[String]) -> anyhow::Result<Self> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "reconciler-host admission CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca = Issuer::new(ca_params, ca_key);

        let mut params = CertificateParams::new(names.to_vec())
            .context("the webhook's names must be DNS names or IP addresses")?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
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

    /// The certificate kept in Secret `namespace/name`, creating it (for
    /// `names`) when there is none. Losing the race to create it to another
    /// replica reads the winner's.
    pub async fn from_secret(
        client: kube::Client,
        namespace: &str,
        name: &str,
        names: &[String],
    ) -> anyhow::Result<Self> {
        let secrets: Api<Secret> = Api::namespaced(client, namespace);
        if let Some(existing) = secrets.get_opt(name).await.with_context(|| {
            format!("cannot read the admission certificate Secret {namespace}/{name}")
        })? {
            return Self::from_secret_data(&existing)
                .with_context(|| format!("Secret {namespace}/{name}"));
        }
        let generated = Self::generate(names)?;
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "reconciler-host"}},
            "stringData": {CERT_KEY: generated.cert_pem, KEY_KEY: generated.key_pem, CA_KEY: generated.ca_bundle_pem},
        }))?;
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(
                    "generated the admission certificate into Secret {namespace}/{name}"
                );
                Ok(generated)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = secrets.get(name).await?;
                Self::from_secret_data(&existing)
            }
            Err(e) => Err(e).with_context(|| {
                format!("cannot create the admission certificate Secret {namespace}/{name}")
            }),
        }
    }

    fn from_secret_data(secret: &Secret) -> anyhow::Result<Self> {
        let data = secret.data.clone().unwrap_or_default();
        let text = |key: &str| -> anyhow::Result<String> {
            let ByteString(bytes) = data
                .get(key)
                .with_context(|| format!("has no {key}: delete it to have it generated again"))?;
            String::from_utf8(bytes.clone()).with_context(|| format!("{key} is not PEM text"))
        };
        let cert_pem = text(CERT_KEY)?;
        Ok(Self {
            key_pem: text(KEY_KEY)?,
            ca_bundle_pem: text(CA_KEY).unwrap_or_else(|_| cert_pem.clone()),
            cert_pem,
        })
    }

    /// The rustls configuration serving this certificate.
    pub fn server_config(&self) -> anyhow::Result<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .context("the serving certificate is not PEM")?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .context("the serving key is not a PEM private key")?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::ServerConfig::builder_with_provider(provider.into())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .context("the serving certificate and key do not match")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_certificate_serves_and_names_its_hosts() {
        let cert = ServingCert::generate(&[
            "reconciler-host.reconciler-system.svc".to_string(),
            "127.0.0.1".to_string(),
        ])
        .unwrap();
        assert!(cert.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(cert.cert_pem, cert.ca_bundle_pem, "signed by its own CA");
        cert.server_config().expect("rustls accepts it");
    }
}
