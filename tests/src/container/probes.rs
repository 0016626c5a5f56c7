//! A kubelet's prober: each probe of a container polled over HTTP at its
//! period, from a thread of its own, with what a kubelet acts on kept:
//! whether the container has been ready, and the longest run of liveness
//! failures (at `failureThreshold` a kubelet would have restarted it).

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use super::bundle::HttpProbe;

/// A kubelet's default `timeoutSeconds`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Seen {
    ready: AtomicBool,
    liveness_failures_in_a_row: AtomicU32,
    most_liveness_failures_in_a_row: AtomicU32,
    liveness_checks: AtomicU32,
    stop: AtomicBool,
}

pub struct Prober {
    seen: Arc<Seen>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub liveness: HttpProbe,
}

impl Prober {
    /// Starts polling `liveness` and `readiness` of the pod at `ip`.
    pub fn start(ip: Ipv4Addr, liveness: HttpProbe, readiness: HttpProbe) -> Self {
        let seen = Arc::new(Seen::default());
        let poll = |probe: HttpProbe, on: fn(&Seen, bool)| {
            let seen = seen.clone();
            std::thread::spawn(move || {
                while !seen.stop.load(Ordering::Relaxed) {
                    on(&seen, succeeds(ip, &probe));
                    let next = std::time::Instant::now() + probe.period;
                    while !seen.stop.load(Ordering::Relaxed) && std::time::Instant::now() < next {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            })
        };
        let threads = vec![
            poll(liveness.clone(), |seen, ok| {
                seen.liveness_checks.fetch_add(1, Ordering::Relaxed);
                if ok {
                    seen.liveness_failures_in_a_row.store(0, Ordering::Relaxed);
                } else {
                    let run = seen
                        .liveness_failures_in_a_row
                        .fetch_add(1, Ordering::Relaxed)
                        + 1;
                    seen.most_liveness_failures_in_a_row
                        .fetch_max(run, Ordering::Relaxed);
                }
            }),
            poll(readiness, |seen, ok| {
                seen.ready.store(ok, Ordering::Relaxed)
            }),
        ];
        Self {
            seen,
            threads,
            liveness,
        }
    }

    /// Whether the last readiness probe passed.
    pub fn ready(&self) -> bool {
        self.seen.ready.load(Ordering::Relaxed)
    }

    /// Whether a kubelet would have restarted the container by now: a
    /// run of liveness failures reached the threshold.
    pub fn would_have_restarted(&self) -> bool {
        self.seen
            .most_liveness_failures_in_a_row
            .load(Ordering::Relaxed)
            >= self.liveness.failure_threshold
    }

    /// How many liveness probes have been made.
    pub fn liveness_checks(&self) -> u32 {
        self.seen.liveness_checks.load(Ordering::Relaxed)
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.seen.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// An HTTP GET as a kubelet's probe makes it: success is a status from
/// 200 to 399 within the timeout.
fn succeeds(ip: Ipv4Addr, probe: &HttpProbe) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let address = SocketAddr::from((ip, probe.port));
        let mut stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT)?;
        stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
        stream.write_all(
            format!(
                "GET {} HTTP/1.1\r\nHost: {ip}:{}\r\nUser-Agent: kube-probe/1.28\r\nConnection: close\r\n\r\n",
                probe.path, probe.port
            )
            .as_bytes(),
        )?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head)?;
        let status: u16 = String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0);
        Ok((200..400).contains(&status))
    };
    attempt().unwrap_or(false)
}
