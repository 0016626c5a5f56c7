//! A small HTTPS client for the host's TLS endpoints (the admission
//! webhooks, the metrics) that trusts only the CA bundle it is given, so a
//! test also shows the endpoint's certificate verifies.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A TLS client that trusts only the certificates of `ca_bundle_pem`.
pub fn connector(ca_bundle_pem: &[u8]) -> Result<tokio_rustls::TlsConnector> {
    connector_as(ca_bundle_pem, None)
}

/// A client certificate (PEM chain) and its key, as the API server presents
/// to webhooks when its admission configuration gives it one.
pub struct ClientIdentity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl ClientIdentity {
    /// A new CA and a client certificate it signed for `name`: the CA's PEM
    /// (what `--admission-client-ca` names) and the client's identity.
    pub fn signed_by_new_ca(name: &str) -> Result<(String, Self)> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair,
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        let ca_key = KeyPair::generate()?;
        let ca_pem = ca_params.self_signed(&ca_key)?.pem();
        let ca = Issuer::new(ca_params, ca_key);
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok((
            ca_pem,
            Self {
                cert_pem: cert.pem(),
                key_pem: key.serialize_pem(),
            },
        ))
    }
}

/// [`connector`] presenting `identity` when the server asks for a client
/// certificate (none: it presents none).
pub fn connector_as(
    ca_bundle_pem: &[u8],
    identity: Option<&ClientIdentity>,
) -> Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle_pem) {
        roots.add(cert?)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots);
    let config = match identity {
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()?;
            let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Sends `request` (a whole HTTP/1.1 request, `Connection: close`) to the
/// server at `addr` on 127.0.0.1; its status code and body.
pub async fn send(addr: SocketAddr, ca_bundle_pem: &str, request: &str) -> Result<(u16, String)> {
    let connector = connector(ca_bundle_pem.as_bytes())?;
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = connector
        .connect(ServerName::try_from("127.0.0.1")?, tcp)
        .await
        .context("the server's certificate verifies against its CA bundle")?;
    tls.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    Ok(parse_response(&raw))
}

/// [`send`] as `identity`: the status code and body, or the error that
/// ended the connection before any answer (a server that refuses the
/// client's certificate says why in a TLS alert).
pub async fn send_as(
    addr: SocketAddr,
    ca_bundle_pem: &str,
    identity: Option<&ClientIdentity>,
    request: &str,
) -> Result<(u16, String)> {
    let connector = connector_as(ca_bundle_pem.as_bytes(), identity)?;
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = connector
        .connect(ServerName::try_from("127.0.0.1")?, tcp)
        .await
        .context("the TLS handshake")?;
    tls.write_all(request.as_bytes())
        .await
        .context("sending the request")?;
    let mut raw = Vec::new();
    if let Err(e) = tls.read_to_end(&mut raw).await
        && raw.is_empty()
    {
        return Err(e).context("the server closed the connection without an answer");
    }
    Ok(parse_response(&raw))
}

/// The status code and body of a raw HTTP/1.1 response (0 if it has none).
pub fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}
