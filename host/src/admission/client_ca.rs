//! Who may call the webhook server (`--admission-client-ca`): only a client
//! presenting a certificate signed by one of these CAs finishes the TLS
//! handshake.
//!
//! Why: the admission port answers whoever reaches it, and each call holds
//! one of the few sandbox instances kept for admission
//! (`--admission-instances`), so any pod that can connect could hold them
//! all and make the API server's calls wait or fail by the plugin's failure
//! policy. The API server can present a client certificate to webhooks (a
//! kubeconfig named in its `--admission-control-config-file`), so requiring
//! one keeps every other caller out before a byte of a request is read.
//! Without the flag any client is served, and the NetworkPolicy in
//! `deploy/` is what keeps other pods away.
//!
//! The file is read once, at start: a new CA takes a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

/// Why a client CA file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    #[error("cannot read the admission client CA {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the admission client CA {} is not PEM: {detail}", path.display())]
    NotPem { path: PathBuf, detail: String },
    #[error(
        "the admission client CA {} holds no certificate: give the CA that signs the API server's admission client certificate, as PEM (-----BEGIN CERTIFICATE-----)",
        path.display()
    )]
    Empty { path: PathBuf },
    #[error("the admission client CA {} cannot verify clients: {detail}", path.display())]
    Unusable { path: PathBuf, detail: String },
}

/// The CAs whose client certificates the webhook server accepts.
#[derive(Clone, Debug)]
pub struct ClientCa {
    verifier: Arc<dyn ClientCertVerifier>,
    path: PathBuf,
    cas: usize,
}

impl ClientCa {
    /// The CAs in the PEM file at `path` (one or more certificates).
    pub fn from_file(path: &Path) -> Result<Self, ClientCaError> {
        let pem = std::fs::read(path).map_err(|source| ClientCaError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_pem(&pem, path)
    }

    /// The CAs in `pem`, read from `path` (named in errors and logs).
    pub fn from_pem(pem: &[u8], path: &Path) -> Result<Self, ClientCaError> {
        let path = path.to_path_buf();
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientCaError::NotPem {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(ClientCaError::Empty { path });
        }
        let cas = certs.len();
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots.add(cert).map_err(|e| ClientCaError::Unusable {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| ClientCaError::Unusable {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        Ok(Self {
            verifier,
            path,
            cas,
        })
    }

    /// What the TLS server checks each client's certificate with; a client
    /// without one is refused.
    pub fn verifier(&self) -> Arc<dyn ClientCertVerifier> {
        self.verifier.clone()
    }

    /// For the log: the file and how many CAs it holds.
    pub fn describe(&self) -> String {
        format!(
            "{} ({} CA{})",
            self.path.display(),
            self.cas,
            if self.cas == 1 { "" } else { "s" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::serving_cert::ServingCert;

    fn error_of(pem: &str) -> String {
        ClientCa::from_pem(pem.as_bytes(), Path::new("/etc/ca.crt"))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_ca_file_that_cannot_verify_anyone_is_refused_saying_why() {
        let missing = ClientCa::from_file(Path::new("/nonexistent/ca.crt"))
            .unwrap_err()
            .to_string();
        assert!(
            missing.starts_with("cannot read the admission client CA /nonexistent/ca.crt"),
            "{missing}"
        );
        for empty in ["", "not a certificate\n"] {
            let e = error_of(empty);
            assert!(
                e.contains("/etc/ca.crt holds no certificate"),
                "{empty:?}: {e}"
            );
        }
        let e = error_of("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
        assert!(e.contains("/etc/ca.crt cannot verify clients"), "{e}");
    }

    #[test]
    fn a_ca_bundle_requires_a_client_certificate() {
        let ca = ServingCert::generate(&["127.0.0.1".to_string()]).unwrap();
        let two = format!("{}{}", ca.ca_bundle_pem, ca.cert_pem);
        let loaded = ClientCa::from_pem(two.as_bytes(), Path::new("ca.crt")).unwrap();
        assert!(loaded.verifier().client_auth_mandatory());
        assert_eq!(loaded.describe(), "ca.crt (2 CAs)");
    }
}
