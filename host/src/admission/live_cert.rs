//! The certificate the webhook server presents, replaceable while it
//! serves: a renewed certificate is picked up by the next TLS handshake,
//! with no restart and no connection dropped.

use std::sync::{Arc, RwLock};

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::client_ca::ClientCa;
use super::serving_cert::ServingCert;

/// The serving certificate in use.
#[derive(Debug)]
pub struct LiveCert {
    current: RwLock<Current>,
}

#[derive(Debug)]
struct Current {
    cert_pem: String,
    key: Arc<CertifiedKey>,
}

impl LiveCert {
    /// Serves `cert` until [`Self::replace`].
    pub fn new(cert: &ServingCert) -> anyhow::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            current: RwLock::new(Current {
                cert_pem: cert.cert_pem.clone(),
                key: certified_key(cert)?,
            }),
        }))
    }

    /// Serves `cert` from the next handshake on; false when it is the one
    /// served already. A certificate that does not load leaves the current
    /// one serving.
    pub fn replace(&self, cert: &ServingCert) -> anyhow::Result<bool> {
        if self.read().cert_pem == cert.cert_pem {
            return Ok(false);
        }
        let key = certified_key(cert)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Current {
            cert_pem: cert.cert_pem.clone(),
            key,
        };
        Ok(true)
    }

    /// The rustls configuration presenting whatever certificate is current,
    /// to any client, or with `callers` only to clients whose certificate
    /// one of its CAs signed.
    pub fn server_config(self: &Arc<Self>, callers: Option<&ClientCa>) -> rustls::ServerConfig {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.into())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions");
        match callers {
            Some(callers) => builder.with_client_cert_verifier(callers.verifier()),
            None => builder.with_no_client_auth(),
        }
        .with_cert_resolver(self.clone())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        self.current.read().unwrap_or_else(|e| e.into_inner())
    }
}

// This impl block of ServingCert lives here, not in serving_cert.rs: a
// configuration for one fixed certificate is a LiveCert never replaced,
// and serving_cert.rs (making and judging certificates) does not depend on
// how they are served.
impl ServingCert {
    /// The rustls configuration serving this certificate (and only it).
    pub fn server_config(&self) -> anyhow::Result<rustls::ServerConfig> {
        let resolver = LiveCert::new(self)?;
        Ok(resolver.server_config(None))
    }
}

impl ResolvesServerCert for LiveCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.read().key.clone())
    }
}

/// The chain and signing key of `cert`, checked to belong together.
fn certified_key(cert: &ServingCert) -> anyhow::Result<Arc<CertifiedKey>> {
    let chain = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .context("the serving certificate is not PEM")?;
    anyhow::ensure!(
        !chain.is_empty(),
        "the serving certificate PEM holds no certificate"
    );
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())
        .context("the serving key is not a PEM private key")?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let key = CertifiedKey::from_der(chain, key, &provider)
        .context("the serving certificate and key do not match")?;
    Ok(Arc::new(key))
}
