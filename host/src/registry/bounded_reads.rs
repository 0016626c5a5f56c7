//! Reading from a registry without letting it decide how much the host
//! holds or how long it waits.
//!
//! oci-client reads a manifest (and every error body) whole before anything
//! is checked, and sigstore pulls every layer of a `.sig` manifest into
//! memory: one hostile or compromised registry could make every replica
//! run out of memory, whether signatures are required or not. So manifests
//! and signature layers are read here, with their own request: the size is
//! checked against a cap while the body streams, and the whole request has
//! a deadline. The token dance of the registry's auth is done here too
//! (oci-client reads a token answer whole, and the registry chooses where
//! it comes from); the token is handed to oci-client for layer pulls, which
//! stream to disk under their own cap.

use std::collections::HashMap;
use std::time::Duration;

use oci_client::secrets::RegistryAuth;

use super::error::RegistryError;
use super::options::RegistryOptions;
use super::reference::PluginReference;

/// The largest manifest read: a Wasm artifact's is under 1 KiB and an
/// image's a few KiB; Distribution itself refuses more than 4 MiB.
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;
/// How much of an error answer is read for its message.
const MAX_ERROR_BYTES: usize = 4 << 10;
/// The largest token answer read: a JWT of a few KiB.
const MAX_TOKEN_BYTES: usize = 64 << 10;

/// What a bounded read asks for.
pub enum Target<'a> {
    Manifest(&'a str),
    Blob(&'a str),
}

/// A client for bounded reads from the registries one set of options
/// reaches.
pub struct BoundedReader {
    http: reqwest::Client,
    insecure: Vec<String>,
    timeout: Duration,
    /// What each repository was authorized with, for this reader's life.
    authorized: tokio::sync::Mutex<HashMap<String, RegistryAuth>>,
}

impl BoundedReader {
    pub fn new(options: &RegistryOptions) -> Self {
        let roots: Vec<reqwest::Certificate> = options
            .extra_ca_pem
            .iter()
            .filter_map(|pem| reqwest::Certificate::from_pem(pem).ok())
            .collect();
        let http = reqwest::Client::builder()
            .tls_certs_merge(roots)
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(options.timeout)
            .user_agent(concat!("reconciler-host/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Self {
            http,
            insecure: options.insecure.clone(),
            timeout: options.timeout,
            authorized: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    fn scheme(&self, registry: &str) -> &'static str {
        if self.insecure.iter().any(|h| h == registry) {
            "http"
        } else {
            "https"
        }
    }

    /// What requests for `reference` carry: a pull token when the registry
    /// asks for one (read capped, within the deadline), else `auth` itself.
    pub async fn authorize(
        &self,
        reference: &PluginReference,
        auth: &RegistryAuth,
    ) -> Result<RegistryAuth, RegistryError> {
        let image = reference.oci();
        let key = format!("{}/{}", image.resolve_registry(), image.repository());
        if let Some(known) = self.authorized.lock().await.get(&key) {
            return Ok(known.clone());
        }
        let name = reference.to_string();
        let work = self.authorize_now(reference, auth);
        let authorized = tokio::time::timeout(self.timeout, work)
            .await
            .unwrap_or_else(|_| Err(self.late(&name)))?;
        self.authorized.lock().await.insert(key, authorized.clone());
        Ok(authorized)
    }

    async fn authorize_now(
        &self,
        reference: &PluginReference,
        auth: &RegistryAuth,
    ) -> Result<RegistryAuth, RegistryError> {
        if let RegistryAuth::Bearer(_) = auth {
            return Ok(auth.clone());
        }
        let registry = reference.oci().resolve_registry();
        let url = format!("{}://{registry}/v2/", self.scheme(registry));
        let Some(challenge) = self.challenge(reference, &url).await? else {
            return Ok(auth.clone());
        };
        let challenges = http_auth::parse_challenges(&challenge).unwrap_or_default();
        let Some(bearer) = challenges
            .iter()
            .find(|c| c.scheme.eq_ignore_ascii_case("Bearer"))
        else {
            // Basic (or nothing this host speaks): the credentials as they are.
            return Ok(auth.clone());
        };
        let param = |name: &str| {
            bearer
                .params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.to_unescaped())
        };
        let Some(realm) = param("realm") else {
            return Err(RegistryError::Unreachable {
                reference: reference.to_string(),
                message: format!(
                    "{url} asks for a token without saying where to get one ({challenge})"
                ),
            });
        };
        self.token(reference, auth, &realm, param("service")).await
    }

    /// The registry's auth challenge (`WWW-Authenticate`) at its version
    /// check `url`, if it sends one. The version check names where a token
    /// comes from; its body is never read.
    async fn challenge(
        &self,
        reference: &PluginReference,
        url: &str,
    ) -> Result<Option<String>, RegistryError> {
        let answer = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| RegistryError::Unreachable {
                reference: reference.to_string(),
                message: super::error::error_chain(&e),
            })?;
        Ok(answer
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string))
    }

    /// A pull token for `reference`'s repository from `realm`, asked for
    /// with `auth`'s credentials; its answer read capped.
    async fn token(
        &self,
        reference: &PluginReference,
        auth: &RegistryAuth,
        realm: &str,
        service: Option<String>,
    ) -> Result<RegistryAuth, RegistryError> {
        let name = reference.to_string();
        let unreachable = |message: String| RegistryError::Unreachable {
            reference: name.clone(),
            message,
        };
        let mut query = vec![(
            "scope".to_string(),
            format!("repository:{}:pull", reference.oci().repository()),
        )];
        if let Some(service) = service {
            query.push(("service".to_string(), service));
        }
        let mut request = self.http.get(realm).query(&query);
        if let RegistryAuth::Basic(user, password) = auth {
            request = request.basic_auth(user, Some(password));
        }
        let mut answer = request
            .send()
            .await
            .map_err(|e| unreachable(super::error::error_chain(&e)))?;
        let status = answer.status();
        let body = read_capped(&mut answer, MAX_TOKEN_BYTES)
            .await
            .map_err(|e| match e {
                ReadError::TooLarge => RegistryError::TooLarge {
                    reference: name.clone(),
                    what: format!("a token from {realm}"),
                    cap: MAX_TOKEN_BYTES,
                },
                ReadError::Http(e) => unreachable(super::error::error_chain(&e)),
            })?;
        if !status.is_success() {
            let message = format!(
                "{realm}: {status} {}",
                String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BYTES)]).trim()
            );
            return Err(match status.as_u16() {
                401 | 403 => RegistryError::Unauthorized {
                    reference: name,
                    message,
                },
                _ => unreachable(message),
            });
        }
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&body)
            .map_err(|e| unreachable(format!("{realm} sent no token: {e}")))?;
        token
            .token
            .or(token.access_token)
            .map(RegistryAuth::Bearer)
            .ok_or_else(|| unreachable(format!("{realm} sent no token")))
    }

    fn late(&self, reference: &str) -> RegistryError {
        RegistryError::Unreachable {
            reference: reference.to_string(),
            message: format!(
                "the registry did not answer in full within {} s (--registry-timeout-secs)",
                self.timeout.as_secs()
            ),
        }
    }

    /// The body of `target` in `reference`'s repository, at most `cap`
    /// bytes, within the deadline; `accept` for a manifest's media types.
    pub async fn get(
        &self,
        reference: &PluginReference,
        auth: &RegistryAuth,
        target: Target<'_>,
        accept: &[&str],
        cap: usize,
    ) -> Result<Vec<u8>, RegistryError> {
        let auth = self.authorize(reference, auth).await?;
        let read = self.get_capped(reference, &auth, target, accept, cap);
        tokio::time::timeout(self.timeout, read)
            .await
            .unwrap_or_else(|_| Err(self.late(&reference.to_string())))
    }

    async fn get_capped(
        &self,
        reference: &PluginReference,
        auth: &RegistryAuth,
        target: Target<'_>,
        accept: &[&str],
        cap: usize,
    ) -> Result<Vec<u8>, RegistryError> {
        let image = reference.oci();
        let registry = image.resolve_registry();
        let scheme = self.scheme(registry);
        let (kind, what) = match target {
            Target::Manifest(what) => ("manifests", what),
            Target::Blob(what) => ("blobs", what),
        };
        let url = format!(
            "{scheme}://{registry}/v2/{}/{kind}/{what}",
            image.repository()
        );
        let mut request = self.http.get(&url);
        if !accept.is_empty() {
            request = request.header(http::header::ACCEPT, accept.join(", "));
        }
        request = match auth {
            RegistryAuth::Bearer(token) => request.bearer_auth(token),
            RegistryAuth::Basic(user, password) => request.basic_auth(user, Some(password)),
            RegistryAuth::Anonymous => request,
        };
        let name = reference.to_string();
        let unreachable = |message: String| RegistryError::Unreachable {
            reference: name.clone(),
            message,
        };
        let mut response = request
            .send()
            .await
            .map_err(|e| unreachable(super::error::error_chain(&e)))?;
        let status = response.status();
        if !status.is_success() {
            let body = read_capped(&mut response, MAX_ERROR_BYTES)
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body).trim().to_string();
            let message = format!("{url}: {status} {text}");
            return Err(match status.as_u16() {
                401 | 403 => RegistryError::Unauthorized {
                    reference: name,
                    message,
                },
                404 => RegistryError::NotFound {
                    reference: name,
                    message,
                },
                _ => unreachable(message),
            });
        }
        let too_large = || RegistryError::TooLarge {
            reference: name.clone(),
            what: url.clone(),
            cap,
        };
        if response.content_length().is_some_and(|n| n > cap as u64) {
            return Err(too_large());
        }
        match read_capped(&mut response, cap).await {
            Ok(body) => Ok(body),
            Err(ReadError::TooLarge) => Err(too_large()),
            Err(ReadError::Http(e)) => Err(unreachable(super::error::error_chain(&e))),
        }
    }
}

enum ReadError {
    TooLarge,
    Http(reqwest::Error),
}

/// The body of `response`, failing as soon as more than `cap` bytes came.
async fn read_capped(response: &mut reqwest::Response, cap: usize) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Http)? {
        if body.len() + chunk.len() > cap {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
pub(crate) mod hostile {
    //! A registry that answers every request the same hostile way, for
    //! tests: on loopback, speaking just enough HTTP/1.1.

    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// How the registry misbehaves on everything but `/v2/`.
    #[derive(Clone, Copy, Debug)]
    pub enum Behaviour {
        /// An endless body, chunked, as fast as the host reads.
        Endless,
        /// Headers, then a byte every 200 ms, forever.
        Drip,
        /// This exact body (a JSON document), at once.
        Body(&'static str),
        /// Asks for a token (a Bearer challenge naming its own `/token`),
        /// and answers `/token` with an endless body.
        EndlessToken,
    }

    /// Starts the registry; its `HOST:PORT`.
    pub async fn start(behaviour: Behaviour) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let own = address.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let address = own.clone();
                tokio::spawn(async move {
                    let mut request = vec![0u8; 8192];
                    let n = stream.read(&mut request).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&request[..n]).to_string();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    if path == "/v2/" && matches!(behaviour, Behaviour::EndlessToken) {
                        let answer = format!(
                            "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"http://{address}/token\",service=\"hostile\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        );
                        let _ = stream.write_all(answer.as_bytes()).await;
                        return;
                    }
                    if path == "/v2/" {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
                            .await;
                        return;
                    }
                    match behaviour {
                        Behaviour::Body(body) => {
                            let answer = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.oci.image.manifest.v1+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = stream.write_all(answer.as_bytes()).await;
                        }
                        Behaviour::Endless | Behaviour::Drip | Behaviour::EndlessToken => {
                            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.oci.image.manifest.v1+json\r\ntransfer-encoding: chunked\r\n\r\n";
                            if stream.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            let chunk = if matches!(behaviour, Behaviour::Endless) {
                                vec![b' '; 64 << 10]
                            } else {
                                vec![b' ']
                            };
                            let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                            framed.extend_from_slice(&chunk);
                            framed.extend_from_slice(b"\r\n");
                            loop {
                                if stream.write_all(&framed).await.is_err() {
                                    return;
                                }
                                if matches!(behaviour, Behaviour::Drip) {
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                }
                            }
                        }
                    }
                });
            }
        });
        address
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::hostile::{Behaviour, start};
    use crate::registry::signatures::{self, TrustPolicy, TrustedKey};
    use crate::registry::{
        Digest, PluginReference, RegistryClient, RegistryError, RegistryOptions,
    };

    fn options(host: &str, timeout: Duration) -> RegistryOptions {
        RegistryOptions {
            insecure: vec![host.to_string()],
            timeout,
            ..RegistryOptions::default()
        }
    }

    fn digest() -> Digest {
        Digest::parse(&format!("sha256:{}", "ab".repeat(32))).unwrap()
    }

    /// `work`, failing the test rather than hanging it (what an unbounded
    /// read of an endless answer does).
    async fn within<T>(work: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(60), work)
            .await
            .expect("a bounded read returns")
    }

    /// Resolving and pulling from a registry that behaves so both stop at a
    /// cap, the resolve's error saying `says`.
    async fn cut_off_at_a_cap(behaviour: Behaviour, says: &str) {
        let host = start(behaviour).await;
        let client = RegistryClient::new(options(&host, Duration::from_secs(60)));
        let reference = PluginReference::parse(&format!("oci://{host}/podset:1")).unwrap();
        let auth = oci_client::secrets::RegistryAuth::Anonymous;
        let e = within(client.resolve(&reference, &auth)).await.unwrap_err();
        assert!(matches!(e, RegistryError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains(says), "{e}");
        let cache = crate::registry::ArtifactCache::new(tempfile::tempdir().unwrap().path());
        let e = within(client.pull(&reference, &digest(), &auth, &cache))
            .await
            .unwrap_err();
        assert!(matches!(e, RegistryError::TooLarge { .. }), "{e}");
    }

    #[tokio::test]
    async fn an_endless_manifest_is_cut_off_at_the_cap_whether_resolved_or_pulled() {
        cut_off_at_a_cap(Behaviour::Endless, "more than 1048576 bytes").await;
    }

    #[tokio::test]
    async fn an_endless_token_answer_is_cut_off_at_its_cap() {
        cut_off_at_a_cap(Behaviour::EndlessToken, "a token from").await;
    }

    #[tokio::test]
    async fn a_registry_that_drips_is_given_up_at_the_deadline() {
        let host = start(Behaviour::Drip).await;
        let client = RegistryClient::new(options(&host, Duration::from_secs(2)));
        let reference = PluginReference::parse(&format!("oci://{host}/podset:1")).unwrap();
        let auth = oci_client::secrets::RegistryAuth::Anonymous;
        let started = Instant::now();
        let e = within(client.resolve(&reference, &auth)).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.reason(), "PullFailed", "{e}");
        assert!(e.to_string().contains("within 2 s"), "{e}");
    }

    fn key_policy() -> TrustPolicy {
        let (_, public) = signatures::generate_key_pair(b"").unwrap();
        TrustPolicy {
            keys: vec![TrustedKey::from_pem("cosign.pub", public.as_bytes()).unwrap()],
            ..TrustPolicy::default()
        }
    }

    /// A `.sig` manifest with these signature layers (size each).
    fn signature_manifest(sizes: &[u64]) -> &'static str {
        let layers: Vec<serde_json::Value> = sizes
            .iter()
            .map(|size| {
                serde_json::json!({
                    "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                    "digest": format!("sha256:{}", "cd".repeat(32)),
                    "size": size,
                    "annotations": {"dev.cosignproject.cosign/signature": "MEUCIQ=="},
                })
            })
            .collect();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": format!("sha256:{}", "ef".repeat(32)), "size": 2},
            "layers": layers,
        });
        Box::leak(manifest.to_string().into_boxed_str())
    }

    #[tokio::test]
    async fn signatures_past_the_caps_are_refused_unread() {
        let reference_on =
            |host: &str| PluginReference::parse(&format!("oci://{host}/podset:1")).unwrap();
        let auth = oci_client::secrets::RegistryAuth::Anonymous;
        let policy = key_policy();
        for (sizes, what) in [
            (vec![300; signatures::MAX_SIGNATURES + 1], "layers"),
            (vec![1 << 30], "bytes"),
        ] {
            let host = start(Behaviour::Body(signature_manifest(&sizes))).await;
            let options = options(&host, Duration::from_secs(60));
            let e = within(signatures::verify(
                &options,
                &policy,
                &reference_on(&host),
                &digest(),
                &auth,
            ))
            .await
            .unwrap_err();
            assert_eq!(e.reason(), "SignatureTooLarge", "{e}");
            assert!(e.to_string().contains(what), "{e}");
        }
        // An endless signature manifest is cut off too.
        let host = start(Behaviour::Endless).await;
        let options = options(&host, Duration::from_secs(60));
        let e = within(signatures::verify(
            &options,
            &policy,
            &reference_on(&host),
            &digest(),
            &auth,
        ))
        .await
        .unwrap_err();
        assert_eq!(e.reason(), "SignatureTooLarge", "{e}");
    }
}
