//! A stand-in for the Service in front of the replicas' admission servers.
//!
//! In a cluster the webhook configurations name a Service, and the API
//! server's connections to it are spread over every ready replica. A
//! control plane without nodes has no Service to route through, so
//! without this each replica's `--admission-url` would be its own port,
//! and the one that registers the configurations (the duties' holder)
//! would answer every review of the burst alone: a cost no replica bears
//! in a cluster, and one that lands on a single replica's CPU.
//!
//! This front takes the API server's TLS connections on one loopback port
//! and hands each whole connection to the next replica in turn, as
//! kube-proxy does per connection; TLS passes through untouched, as the
//! replicas share one serving certificate (`--admission-cert-secret`). A
//! replica that does not accept (not started yet, or killed) is skipped
//! for the next. Its own CPU is the bench's, as kube-proxy's is not the
//! replicas'.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The front: listening until dropped.
pub struct ServiceFront {
    address: SocketAddr,
    served: Arc<[Served]>,
    accepting: JoinHandle<()>,
}

/// What one replica was handed.
#[derive(Debug, Default)]
pub struct Served {
    connections: AtomicU64,
    /// Bytes from the API server: the reviews, and TLS around them.
    bytes_in: AtomicU64,
}

impl ServiceFront {
    /// Listens on a free loopback port and spreads its connections over
    /// `backends`.
    pub async fn start(backends: Vec<SocketAddr>) -> anyhow::Result<Self> {
        anyhow::ensure!(!backends.is_empty(), "a front needs a replica behind it");
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let served: Arc<[Served]> = backends.iter().map(|_| Served::default()).collect();
        let backends: Arc<[SocketAddr]> = backends.into();
        let next = Arc::new(AtomicUsize::new(0));
        let counts = served.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let first = next.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(forward(client, backends.clone(), counts.clone(), first));
            }
        });
        Ok(Self {
            address,
            served,
            accepting,
        })
    }

    /// Where the API server is to connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Connections and bytes in so far, by replica: whether the reviews
    /// were spread.
    pub fn served(&self) -> Vec<(u64, u64)> {
        self.served
            .iter()
            .map(|s| {
                (
                    s.connections.load(Ordering::Relaxed),
                    s.bytes_in.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

impl Drop for ServiceFront {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Connects `client` to the first replica from `first` on that accepts,
/// and copies both ways until either side closes.
async fn forward(
    client: TcpStream,
    backends: Arc<[SocketAddr]>,
    served: Arc<[Served]>,
    first: usize,
) {
    for i in 0..backends.len() {
        let at = (first + i) % backends.len();
        let Ok(replica) = TcpStream::connect(backends[at]).await else {
            continue;
        };
        served[at].connections.fetch_add(1, Ordering::Relaxed);
        let _ = client.set_nodelay(true);
        let _ = replica.set_nodelay(true);
        let (client_read, client_write) = client.into_split();
        let (replica_read, replica_write) = replica.into_split();
        let served = served.clone();
        tokio::join!(
            pump(client_read, replica_write, Some((&served, at))),
            pump(replica_read, client_write, None),
        );
        return;
    }
}

/// Copies `from` to `to` until `from` ends or either fails, counting what
/// came in for replica `counted`; then closes `to`'s side.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    counted: Option<(&Arc<[Served]>, usize)>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        if let Some((served, at)) = counted {
            served[at].bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend that answers each connection with its own name.
    async fn backend(name: &'static str) -> (SocketAddr, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let _ = stream.write_all(name.as_bytes()).await;
            }
        });
        (address, task)
    }

    async fn answer(front: SocketAddr) -> String {
        let mut stream = TcpStream::connect(front).await.unwrap();
        stream.write_all(b"ping").await.unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        text
    }

    #[tokio::test]
    async fn connections_go_to_each_replica_in_turn_and_skip_one_that_is_gone() {
        let (a, _a) = backend("a").await;
        let (b, b_task) = backend("b").await;
        let (c, _c) = backend("c").await;
        let front = ServiceFront::start(vec![a, b, c]).await.unwrap();
        let mut answers = Vec::new();
        for _ in 0..6 {
            answers.push(answer(front.address()).await);
        }
        assert_eq!(answers, ["a", "b", "c", "a", "b", "c"]);
        assert_eq!(front.served(), [(2, 8), (2, 8), (2, 8)]);

        // b stops accepting: its turns go to the one after it.
        b_task.abort();
        let _ = b_task.await;
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(answer(front.address()).await);
        }
        assert_eq!(answers, ["a", "c", "c"]);
        assert_eq!(front.served()[0].0, 3);
        assert_eq!(front.served()[1].0, 2, "b was skipped");
        assert_eq!(front.served()[2].0, 4);
    }
}
