//! Keyless signatures checked from the bytes the capped read already took.
//!
//! sigstore checks a keyless signature (its certificate's chain to the
//! Fulcio roots, its Rekor bundle) only while it reads the signature from a
//! registry itself, and it reads without a cap: a hostile registry could
//! answer that second read with anything, as large as it likes. So sigstore
//! reads from here instead: a server on loopback, for the one check, that
//! answers with exactly the signature manifest and layers the capped read
//! took ([`super::capped_read`]), and with nothing else. Whatever the
//! registry does, what sigstore sees is at most what the caps let through.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// The longest request head read; sigstore's are a few hundred bytes.
const MAX_REQUEST_HEAD: usize = 16 * 1024;

/// What the replay serves.
pub struct Replayed {
    /// The repository, as the registry names it.
    pub repository: String,
    /// The digest the signatures are of (answered to sigstore's HEAD).
    pub source_digest: String,
    /// The signature tag (`sha256-<hex>.sig`) and its manifest.
    pub tag: String,
    pub manifest: Vec<u8>,
    pub manifest_media_type: String,
    /// The layers, by digest.
    pub blobs: BTreeMap<String, Vec<u8>>,
}

/// A running replay; stops when dropped.
pub struct Replay {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Replay {
    pub async fn start(replayed: Replayed) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let replayed = Arc::new(replayed);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let replayed = replayed.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 2048];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                        if head.len() > MAX_REQUEST_HEAD {
                            return;
                        }
                    }
                    let line = String::from_utf8_lossy(&head);
                    let mut words = line.split_whitespace();
                    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                    let answer = replayed.answer(path);
                    let _ = stream.write_all(&answer.render(method == "HEAD")).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(Self { address, task })
    }

    /// `127.0.0.1:PORT`, the registry host to give sigstore.
    pub fn host(&self) -> String {
        self.address.to_string()
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Answer<'a> {
    status: &'static str,
    body: &'a [u8],
    content_type: &'a str,
    digest: Option<String>,
}

impl Answer<'_> {
    fn not_found() -> Self {
        Self {
            status: "404 Not Found",
            body: b"",
            content_type: "application/json",
            digest: None,
        }
    }

    fn render(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {}\r\ncontent-length: {}\r\ncontent-type: {}\r\nconnection: close\r\n",
            self.status,
            self.body.len(),
            self.content_type
        );
        if let Some(digest) = &self.digest {
            out.push_str(&format!("docker-content-digest: {digest}\r\n"));
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        if !head_only {
            out.extend_from_slice(self.body);
        }
        out
    }
}

impl Replayed {
    fn answer(&self, path: &str) -> Answer<'_> {
        if path == "/v2/" || path == "/v2" {
            return Answer {
                status: "200 OK",
                body: b"{}",
                content_type: "application/json",
                digest: None,
            };
        }
        let Some(rest) = path
            .strip_prefix("/v2/")
            .and_then(|p| p.strip_prefix(self.repository.as_str()))
        else {
            return Answer::not_found();
        };
        if let Some(reference) = rest.strip_prefix("/manifests/") {
            if reference == self.source_digest {
                // sigstore asks only the digest of the image it checks.
                return Answer {
                    status: "200 OK",
                    body: b"",
                    content_type: oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
                    digest: Some(self.source_digest.clone()),
                };
            }
            if reference == self.tag {
                return Answer {
                    status: "200 OK",
                    body: &self.manifest,
                    content_type: &self.manifest_media_type,
                    digest: Some(super::super::content_digest::sha256_digest(&self.manifest)),
                };
            }
            return Answer::not_found();
        }
        if let Some(digest) = rest.strip_prefix("/blobs/")
            && let Some(blob) = self.blobs.get(digest)
        {
            return Answer {
                status: "200 OK",
                body: blob,
                content_type: "application/octet-stream",
                digest: Some(digest.to_string()),
            };
        }
        Answer::not_found()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(host: &str, method: &str, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
        stream
            .write_all(format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn it_serves_what_it_was_given_and_nothing_else() {
        let replay = Replay::start(Replayed {
            repository: "team/podset".into(),
            source_digest: "sha256:aa".into(),
            tag: "sha256-aa.sig".into(),
            manifest: b"{\"layers\":[]}".to_vec(),
            manifest_media_type: oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.into(),
            blobs: BTreeMap::from([("sha256:bb".to_string(), b"signature".to_vec())]),
        })
        .await
        .unwrap();
        let host = replay.host();
        let manifest = get(&host, "GET", "/v2/team/podset/manifests/sha256-aa.sig").await;
        assert!(manifest.starts_with("HTTP/1.1 200"), "{manifest}");
        assert!(manifest.ends_with("{\"layers\":[]}"), "{manifest}");
        let head = get(&host, "HEAD", "/v2/team/podset/manifests/sha256:aa").await;
        assert!(head.contains("docker-content-digest: sha256:aa"), "{head}");
        let blob = get(&host, "GET", "/v2/team/podset/blobs/sha256:bb").await;
        assert!(blob.ends_with("signature"), "{blob}");
        for path in [
            "/v2/team/podset/blobs/sha256:cc",
            "/v2/team/podset/manifests/latest",
            "/v2/other/podset/manifests/sha256-aa.sig",
            "/v2/team/podset/referrers/sha256:aa",
        ] {
            let answer = get(&host, "GET", path).await;
            assert!(answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
        }
    }
}
