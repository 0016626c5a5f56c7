//! A TCP relay between the host and the API server that a test can cut.
//!
//! Some faults are a network's, not a server's: every connection of one
//! client drops at once while the API server keeps running and others keep
//! changing objects. Nothing in a Kubernetes cluster does that on demand,
//! and stopping the host (SIGSTOP) is no substitute: its open watches keep
//! receiving events into their sockets and it would read them on waking. So
//! the host is pointed at this relay (a kubeconfig whose server is
//! [`SeverableLink::url`]) and the test severs it: every open connection is
//! shut at once, what was in flight is lost, and new connections are closed
//! as soon as they are accepted, until the test restores it.
//!
//! Bytes are relayed as they are (TLS passes through; the API server's
//! certificate names 127.0.0.1, which is also where the relay listens). It
//! runs on threads of its own, so a test blocked in a synchronous call does
//! not stall the host's traffic.
//!
//! The same relay also stands in for a Service in front of several
//! replicas ([`SeverableLink::start_spread`]): each connection goes to the
//! next upstream in turn, skipping one that does not accept, as kube-proxy
//! spreads a Service's connections, and it counts what each was handed.
//!
//! Both directions are counted, so a bench can put each replica behind a
//! relay of its own and read what it sent and what the API server sent it
//! ([`SeverableLink::traffic`]).

use std::collections::HashMap;
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context as _, Result};

/// How long the relay waits for the API server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A relay from a port of 127.0.0.1 to the API server.
pub struct SeverableLink {
    listen: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    upstreams: Mutex<Vec<Arc<Upstream>>>,
    /// Where the next connection tries first, counted over all of them.
    next_upstream: AtomicUsize,
    severed: AtomicBool,
    stopping: AtomicBool,
    next_id: AtomicU64,
    /// Both ends of every open relayed connection, to shut them at once.
    open: Mutex<HashMap<u64, (TcpStream, TcpStream)>>,
}

/// One place connections are relayed to, and what it was handed.
struct Upstream {
    address: SocketAddr,
    connections: AtomicU64,
    /// Bytes from the clients.
    bytes_in: AtomicU64,
    /// Bytes back to the clients.
    bytes_out: AtomicU64,
}

/// What one upstream was handed through the relay, so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub connections: u64,
    /// From the clients to the upstream.
    pub bytes_in: u64,
    /// From the upstream back to the clients.
    pub bytes_out: u64,
}

impl Traffic {
    /// What was handed since `earlier` (a reading of the same upstream).
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            connections: self.connections.saturating_sub(earlier.connections),
            bytes_in: self.bytes_in.saturating_sub(earlier.bytes_in),
            bytes_out: self.bytes_out.saturating_sub(earlier.bytes_out),
        }
    }
}

impl Upstream {
    fn new(address: SocketAddr) -> Arc<Self> {
        Arc::new(Self {
            address,
            connections: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
        })
    }
}

impl Shared {
    fn upstreams(&self) -> Vec<Arc<Upstream>> {
        self.upstreams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Connects to the first upstream, from the next one's turn on, that
    /// accepts.
    fn connect(&self) -> Option<(TcpStream, Arc<Upstream>)> {
        let upstreams = self.upstreams();
        let first = self.next_upstream.fetch_add(1, Ordering::SeqCst);
        (0..upstreams.len()).find_map(|i| {
            let upstream = &upstreams[(first + i) % upstreams.len()];
            let server = TcpStream::connect_timeout(&upstream.address, CONNECT_TIMEOUT).ok()?;
            upstream.connections.fetch_add(1, Ordering::SeqCst);
            Some((server, upstream.clone()))
        })
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, (TcpStream, TcpStream)>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self, id: u64) {
        if let Some((client, server)) = self.open().remove(&id) {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    }

    fn close_all(&self) {
        for (_, (client, server)) in self.open().drain() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    }
}

impl SeverableLink {
    /// Starts relaying connections to `upstream` (the API server's address).
    pub fn start(upstream: SocketAddr) -> Result<Self> {
        Self::start_spread(vec![upstream])
    }

    /// Starts relaying each connection to the next of `upstreams` in turn
    /// that accepts (a Service in front of replicas).
    pub fn start_spread(upstreams: Vec<SocketAddr>) -> Result<Self> {
        anyhow::ensure!(!upstreams.is_empty(), "a relay needs an upstream");
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the relay's port")?;
        let listen = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstreams: Mutex::new(upstreams.into_iter().map(Upstream::new).collect()),
            next_upstream: AtomicUsize::new(0),
            severed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("severable-link".into())
                .spawn(move || accept(&listener, &shared))
                .context("starting the relay's thread")?
        };
        Ok(Self {
            listen,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// `https://127.0.0.1:<port>`: the server a kubeconfig gives the host.
    pub fn url(&self) -> String {
        format!("https://{}", self.listen)
    }

    /// The address the relay listens on.
    pub fn address(&self) -> SocketAddr {
        self.listen
    }

    /// Where to relay from now on (an API server restarted on another port).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self
            .shared
            .upstreams
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = vec![Upstream::new(upstream)];
    }

    /// Connections and bytes in that each upstream was handed, in the
    /// order given: whether the connections were spread.
    pub fn handed(&self) -> Vec<(u64, u64)> {
        self.traffic()
            .into_iter()
            .map(|t| (t.connections, t.bytes_in))
            .collect()
    }

    /// Connections and bytes both ways that each upstream was handed, in
    /// the order given.
    pub fn traffic(&self) -> Vec<Traffic> {
        self.shared
            .upstreams()
            .iter()
            .map(|u| Traffic {
                connections: u.connections.load(Ordering::SeqCst),
                bytes_in: u.bytes_in.load(Ordering::SeqCst),
                bytes_out: u.bytes_out.load(Ordering::SeqCst),
            })
            .collect()
    }

    /// Shuts every open connection and refuses new ones until [`restore`].
    ///
    /// [`restore`]: SeverableLink::restore
    pub fn sever(&self) {
        self.shared.severed.store(true, Ordering::SeqCst);
        self.shared.close_all();
    }

    /// Relays new connections again.
    pub fn restore(&self) {
        self.shared.severed.store(false, Ordering::SeqCst);
    }
}

impl Drop for SeverableLink {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.close_all();
        // The acceptor blocks in accept(): a connection wakes it to stop.
        let _ = TcpStream::connect_timeout(&self.listen, CONNECT_TIMEOUT);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else {
            continue;
        };
        // Severed: the client sees its connection closed at once, as when
        // the network between it and the server is gone.
        if shared.severed.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Some((server, upstream)) = shared.connect() else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        let ends = (client.try_clone(), server.try_clone());
        let (Ok(client_end), Ok(server_end)) = ends else {
            continue;
        };
        shared.open().insert(id, (client_end, server_end));
        // Severed while connecting: this one goes too.
        if shared.severed.load(Ordering::SeqCst) {
            shared.close(id);
            continue;
        }
        let directions = [
            (
                client.try_clone(),
                server.try_clone(),
                upstream.clone(),
                Way::In,
            ),
            (Ok(server), Ok(client), upstream, Way::Out),
        ];
        for (from, to, counted, way) in directions {
            let (Ok(from), Ok(to)) = (from, to) else {
                shared.close(id);
                break;
            };
            let relaying = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("severable-link-relay".into())
                .spawn(move || {
                    relay(from, to, counted.counter(way));
                    // One direction ending ends the connection: HTTP needs
                    // no half-closed sockets.
                    relaying.close(id);
                });
            if spawned.is_err() {
                shared.close(id);
            }
        }
    }
}

/// Which way a relay thread copies.
#[derive(Clone, Copy)]
enum Way {
    /// Client to upstream.
    In,
    /// Upstream to client.
    Out,
}
impl Upstream {
    fn counter(&self, way: Way) -> &AtomicU64 {
        match way {
            Way::In => &self.bytes_in,
            Way::Out => &self.bytes_out,
        }
    }
}

/// Copies until either side closes or fails, counting the bytes into
/// `counted`.
fn relay(mut from: TcpStream, mut to: TcpStream, counted: &AtomicU64) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        counted.fetch_add(n as u64, Ordering::SeqCst);
        if to.write_all(&buffer[..n]).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use super::SeverableLink;

    /// A server that echoes every connection, on threads of its own.
    fn echo_server() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut buffer = [0u8; 64];
                    while let Ok(n) = stream.read(&mut buffer) {
                        if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn connect(link: &SeverableLink) -> TcpStream {
        let stream = TcpStream::connect(link.listen).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
    }

    /// Whether `stream` echoes what it is sent.
    fn echoes(stream: &mut TcpStream) -> bool {
        if stream.write_all(b"ping").is_err() {
            return false;
        }
        let mut answer = [0u8; 4];
        stream.read_exact(&mut answer).is_ok() && &answer == b"ping"
    }

    /// A server that answers each connection with `name` once it has read
    /// four bytes, and closes it; stops accepting when `stop` is dropped.
    fn named_server(name: &'static str) -> (std::net::SocketAddr, std::sync::mpsc::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            while let Err(std::sync::mpsc::TryRecvError::Empty) = stopped.try_recv() {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        let mut ping = [0u8; 4];
                        if stream.read_exact(&mut ping).is_ok() {
                            let _ = stream.write_all(name.as_bytes());
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        (addr, stop)
    }

    fn answer(link: &SeverableLink) -> String {
        let mut stream = connect(link);
        stream.write_all(b"ping").unwrap();
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        text
    }

    #[test]
    fn spreads_connections_in_turn_and_skips_an_upstream_that_is_gone() {
        let (a, _a) = named_server("a");
        let (b, stop_b) = named_server("b");
        let (c, _c) = named_server("c");
        let link = SeverableLink::start_spread(vec![a, b, c]).unwrap();
        let answers: Vec<String> = (0..6).map(|_| answer(&link)).collect();
        assert_eq!(answers, ["a", "b", "c", "a", "b", "c"]);
        assert_eq!(link.handed(), [(2, 8), (2, 8), (2, 8)]);
        // Each upstream answered its two connections with its one-letter name.
        let back: Vec<u64> = link.traffic().iter().map(|t| t.bytes_out).collect();
        assert_eq!(back, [2, 2, 2], "bytes back to the clients");

        // b stops accepting: its turn goes to the one after it.
        drop(stop_b);
        std::thread::sleep(Duration::from_millis(100));
        let answers: Vec<String> = (0..3).map(|_| answer(&link)).collect();
        assert_eq!(answers, ["a", "c", "c"]);
        let connections: Vec<u64> = link.handed().iter().map(|(c, _)| *c).collect();
        assert_eq!(connections, [3, 2, 4], "b was skipped");
    }

    #[test]
    fn relays_until_severed_and_again_once_restored() {
        let link = SeverableLink::start(echo_server()).unwrap();
        let mut open = connect(&link);
        assert!(echoes(&mut open), "the link should relay");

        link.sever();
        assert!(
            !echoes(&mut open),
            "a connection open when severed should be shut"
        );
        let mut refused = connect(&link);
        assert!(
            !echoes(&mut refused),
            "a new connection should be closed while severed"
        );

        link.restore();
        let mut again = connect(&link);
        assert!(
            echoes(&mut again),
            "the link should relay again once restored"
        );
    }
}
