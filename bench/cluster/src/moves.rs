//! `bench-cluster scale --moves`: what a ring change costs at scale. Three
//! replicas hold every object; then a fourth joins, one leaves gracefully
//! (SIGTERM) and one is lost (SIGKILL). For each move, from the API
//! server's side:
//!
//! - the replicas' object writes in the move (the audit log; the probes'
//!   own namespace set aside, Leases apart): a move is to cost none;
//! - the bytes each replica received in it (its counting relay) against
//!   one full list of every PodSet and Deployment, which a replica that
//!   re-listed its kinds would receive in whole;
//! - how long until every replica settled on the new ring (their logs);
//! - the p99 latency of probe keys that did not move, before and after.
//!
//! The probes are PodSets of a namespace of their own whose size is
//! changed in turn, ten a second; a sample's latency runs from the patch
//! to the driver's watch seeing the Deployment follow. Which keys moved is
//! computed from the two rings with the host's own assignment.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use reconciler_host::sharding::assignment::{Replica, Ring, ShardKey};
use reconciler_tests::real_cluster::kubeconfig;
use reconciler_tests::real_cluster::severable_link::SeverableLink;

use crate::audit::{AuditTail, Writes};
use crate::cluster::{CONTROLLER_USER, REPLICA_USERS};
use crate::driver::{PROBE_NAMESPACE, client_for, create_namespace, create_podsets};
use crate::following::{Samples, follow_deployments};
use crate::podset::PodSet;
use crate::replicas::{mib, settle_lines};
use crate::scale::{Fleet, FleetSetup, Limits, api_server_address};
use crate::stats::percentile;

/// Probe PodSets: each is patched once every PROBES x PROBE_EVERY (30 s),
/// so a key's samples never overlap.
const PROBES: usize = 300;
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// The samples before a move and after it.
const WINDOW: Duration = Duration::from_secs(20);
/// The aims: bytes at most 1.3/N of a full list, unmoved p99 within 10%.
const LIST_AIM: f64 = 1.3;
const P99_AIM: f64 = 1.10;
/// A graceful move is to be effective within this.
const EFFECTIVE_AIM: Duration = Duration::from_secs(3);

/// One move, measured.
struct Move {
    what: &'static str,
    /// Replicas after it.
    replicas: usize,
    /// Write requests (a no-op apply is one).
    writes: Writes,
    /// Objects with a new resourceVersion, or gone.
    objects_changed: usize,
    /// Bytes received in the move, by replica after it.
    received: Vec<u64>,
    /// From the move (for a join: the joiner's Lease) to the last replica
    /// settled on the new ring.
    effective: Duration,
    /// For a join: from the start of the process.
    from_start: Option<Duration>,
    unmoved_before: Option<Duration>,
    unmoved_after: Option<Duration>,
    moved_after: Option<Duration>,
    moved_keys: usize,
}

pub async fn run(
    setup: &FleetSetup<'_>,
    podsets: usize,
    quiet: Duration,
    timeout: Duration,
) -> anyhow::Result<String> {
    let client = client_for(&setup.target.admin_kubeconfig).await?;
    create_namespace(&client, PROBE_NAMESPACE).await?;
    let names: Vec<String> = (0..PROBES).map(|i| format!("probe-{i:03}")).collect();
    create_podsets(&client, PROBE_NAMESPACE, &names, 0, 8).await?;
    let lister = Lister::new(setup).await?;
    let audit = setup
        .target
        .audit_log
        .clone()
        .context("the moves need the bench's own API server (its audit log)")?;

    let mut fleet = Fleet::start(setup, 3, true, "moves")?;
    fleet
        .settle(podsets + PROBES, quiet, timeout)
        .await
        .context("three replicas before the moves")?;
    eprintln!("[moves] three replicas settled; probing");
    let mut listed = lister.list().await?;
    let full_list = listed.bytes;
    eprintln!(
        "[moves] one full list of every PodSet and Deployment: {} ({} objects)",
        mib(full_list),
        listed.versions.len()
    );

    let samples = Arc::new(Samples::default());
    let watching = follow_deployments(client.clone(), PROBE_NAMESPACE, samples.clone()).await?;
    let probing = tokio::spawn(probe(client.clone(), names.clone(), samples.clone()));

    let mut moves = Vec::new();
    for what in ["join", "SIGTERM", "SIGKILL"] {
        // The before-window: steady, the last list done.
        tokio::time::sleep(WINDOW).await;
        let ring_before = ring_of(&fleet)?;
        let traffic_before = fleet.traffic();
        let mut tails: Vec<AuditTail> = (0..REPLICA_USERS)
            .map(|i| {
                AuditTail::from_end(audit.clone(), &format!("{CONTROLLER_USER}-{i}"))
                    .map(|t| t.setting_aside(PROBE_NAMESPACE))
            })
            .collect::<anyhow::Result<_>>()?;
        let at = Timestamp::now();
        let t0 = Instant::now();
        let mut kept: Vec<u64> = traffic_before.iter().map(|t| t.bytes_out).collect();
        match what {
            "join" => {
                fleet.spawn(setup, Limits::default())?;
                kept.push(0);
            }
            "SIGTERM" => {
                fleet.remove(0, true)?;
                kept.remove(0);
            }
            _ => {
                fleet.remove(0, false)?;
                kept.remove(0);
            }
        }
        let n = fleet.logs().len();
        let settled_at = wait_settled(&mut fleet, n, at, timeout).await?;
        let joined_at = (what == "join")
            .then(|| joined_at(fleet.logs().last().expect("the joiner's log")))
            .flatten();
        let effective = since(joined_at.unwrap_or(at), settled_at);
        let from_start = joined_at.map(|_| since(at, settled_at));
        // The after-window, and quiet past the settle.
        let until = t0 + WINDOW.max(effective + quiet);
        tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
        fleet.check_running()?;
        let received: Vec<u64> = fleet
            .traffic()
            .iter()
            .zip(&kept)
            .map(|(now, before)| now.bytes_out.saturating_sub(*before))
            .collect();
        let mut writes = Writes::default();
        for tail in &mut tails {
            writes.add(&tail.read()?);
        }
        let ring_after = ring_of(&fleet)?;
        let moved = |name: &str| {
            let bucket = ShardKey::object("local", Some(PROBE_NAMESPACE), name).bucket();
            ring_before.owner_of(bucket) != ring_after.owner_of(bucket)
        };
        // Samples of the window's end may still be in flight: the list
        // gives them a moment before they are read.
        let after = lister.list().await?;
        let objects_changed = changed(&listed, &after);
        listed = after;
        let p99 = |from, to, keep: &dyn Fn(&str) -> bool| {
            percentile(&samples.latencies(from, to, keep), 0.99)
        };
        let measured = Move {
            what,
            replicas: n,
            writes,
            objects_changed,
            received,
            effective,
            from_start,
            unmoved_before: p99(t0 - WINDOW, t0, &|k| !moved(k)),
            unmoved_after: p99(t0, t0 + WINDOW, &|k| !moved(k)),
            moved_after: p99(t0, t0 + WINDOW, &moved),
            moved_keys: names.iter().filter(|k| moved(k)).count(),
        };
        eprintln!(
            "[moves] {what}: {n} replicas, objects changed {}, write requests {}, received {:?}, effective {:.1} s, unmoved p99 {:?} -> {:?}",
            measured.objects_changed,
            measured.writes.objects(),
            measured.received,
            effective.as_secs_f64(),
            measured.unmoved_before,
            measured.unmoved_after
        );
        moves.push(measured);
    }
    probing.abort();
    watching.abort();
    fleet.stop()?;
    Ok(render(podsets, full_list, &moves))
}

/// Lists every PodSet and every Deployment, in pages of 500 as a watch
/// lists, through a counting relay of the lister's own.
struct Lister {
    link: SeverableLink,
    client: kube::Client,
}

/// One list: the bytes it took, and each object's resourceVersion outside
/// the probes' namespace (by kind, namespace and name).
struct Listed {
    bytes: u64,
    versions: BTreeMap<String, String>,
}

impl Lister {
    async fn new(setup: &FleetSetup<'_>) -> anyhow::Result<Self> {
        let kube = &setup.target.admin_kubeconfig;
        let address = api_server_address(kube)?;
        let link = SeverableLink::start(address)?;
        let through = setup.state.join("moves-lister.kubeconfig");
        kubeconfig::with_server(Some(kube), &link.url(), &through)?;
        let client = client_for(&through).await?;
        Ok(Self { link, client })
    }

    async fn list(&self) -> anyhow::Result<Listed> {
        let before = self.link.traffic().first().copied().unwrap_or_default();
        let mut versions = BTreeMap::new();
        list_into(&Api::<PodSet>::all(self.client.clone()), &mut versions).await?;
        list_into(&Api::<Deployment>::all(self.client.clone()), &mut versions).await?;
        let after = self.link.traffic().first().copied().unwrap_or_default();
        Ok(Listed {
            bytes: after.since(&before).bytes_out,
            versions,
        })
    }
}

async fn list_into<K>(api: &Api<K>, versions: &mut BTreeMap<String, String>) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(500);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = api.list(&params).await?;
        for item in &page.items {
            let meta = item.meta();
            let namespace = meta.namespace.as_deref().unwrap_or_default();
            if namespace == PROBE_NAMESPACE {
                continue;
            }
            versions.insert(
                format!(
                    "{}/{namespace}/{}",
                    K::kind(&()),
                    meta.name.as_deref().unwrap_or_default()
                ),
                meta.resource_version.clone().unwrap_or_default(),
            );
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(());
        }
    }
}

/// The objects whose resourceVersion differs between two lists (or that
/// one of them lacks).
fn changed(before: &Listed, after: &Listed) -> usize {
    let gone = before
        .versions
        .keys()
        .filter(|k| !after.versions.contains_key(*k))
        .count();
    after
        .versions
        .iter()
        .filter(|(k, v)| before.versions.get(*k) != Some(v))
        .count()
        + gone
}

/// Patches the probes' size in turn, toggling each between 1 and 2.
async fn probe(client: kube::Client, names: Vec<String>, samples: Arc<Samples>) {
    let api = Api::<PodSet>::namespaced(client, PROBE_NAMESPACE);
    let mut sizes: BTreeMap<&str, i32> = BTreeMap::new();
    let mut tick = tokio::time::interval(PROBE_EVERY);
    for name in names.iter().cycle() {
        tick.tick().await;
        let size = if sizes.get(name.as_str()) == Some(&1) {
            2
        } else {
            1
        };
        let i = samples.sent(name, size, Instant::now());
        let patch = Patch::Merge(serde_json::json!({"spec": {"size": size}}));
        match api.patch(name, &PatchParams::default(), &patch).await {
            Ok(_) => {
                sizes.insert(name, size);
                samples.answered(i, true);
            }
            Err(e) => {
                samples.answered(i, false);
                eprintln!("bench-cluster: patching probe {name}: {e}");
            }
        }
    }
}

/// The ring of the fleet's replicas, as each named itself on joining.
fn ring_of(fleet: &Fleet) -> anyhow::Result<Ring> {
    let identities = fleet
        .logs()
        .iter()
        .map(|log| {
            let text = std::fs::read_to_string(log)?;
            text.lines()
                .find_map(|l| {
                    let (_, after) = l.split_once("joined shard ring ")?;
                    let (_, rest) = after.split_once(" as ")?;
                    rest.split_whitespace().next().map(str::to_string)
                })
                .with_context(|| format!("{} says no identity", log.display()))
        })
        .collect::<anyhow::Result<Vec<String>>>()?;
    Ok(Ring::new(identities.iter().map(|id| Replica::new(id))))
}

/// The time a log line was written (its first word).
fn stamp(line: &str) -> Option<Timestamp> {
    line.split_whitespace().next()?.parse().ok()
}

/// When the joiner's Lease was created, as its log says.
fn joined_at(log: &std::path::Path) -> Option<Timestamp> {
    std::fs::read_to_string(log)
        .ok()?
        .lines()
        .find(|l| l.contains("joined shard ring "))
        .and_then(stamp)
}

/// Waits until every replica's log says it settled on a ring of `n` after
/// `after`; returns when the last of them did.
async fn wait_settled(
    fleet: &mut Fleet,
    n: usize,
    after: Timestamp,
    timeout: Duration,
) -> anyhow::Result<Timestamp> {
    let deadline = Instant::now() + timeout;
    loop {
        fleet.check_running()?;
        let firsts: Vec<Option<Timestamp>> = fleet
            .logs()
            .iter()
            .map(|log| {
                settle_lines(log, n)
                    .iter()
                    .filter_map(|l| stamp(l))
                    .find(|t| *t > after)
            })
            .collect();
        if firsts.iter().all(Option::is_some) {
            return Ok(firsts.into_iter().flatten().max().expect("a replica"));
        }
        if Instant::now() > deadline {
            bail!("the replicas did not all settle on a ring of {n} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn since(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or_default()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{} ms", d.as_millis()))
}

fn render(podsets: usize, full_list: u64, moves: &[Move]) -> String {
    let mut out = format!(
        "### Moves at {} objects\n\n\
         Three replicas, then each move in turn. Bytes are what each replica received in the move against one full \
         list of every PodSet and Deployment ({}); the aim is at most {LIST_AIM}/N. Latency: p99 from a probe's patch \
         to its Deployment following, of the probe keys that did not move, in the {} s before and after.\n\n\
         | move | replicas after | objects changed | object write requests (Leases apart) | bytes received, largest replica / full list | aim | settled on the new ring after | unmoved p99 before -> after | ratio | moved keys: p99 after |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        2 * podsets + 2 * PROBES,
        mib(full_list),
        WINDOW.as_secs()
    );
    for m in moves {
        let largest = m.received.iter().copied().max().unwrap_or(0);
        let ratio = match (m.unmoved_before, m.unmoved_after) {
            (Some(b), Some(a)) if !b.is_zero() => {
                format!("{:.2}", a.as_secs_f64() / b.as_secs_f64())
            }
            _ => "-".into(),
        };
        let effective = match m.from_start {
            Some(start) => format!(
                "{:.1} s from its Lease ({:.1} s from its start)",
                m.effective.as_secs_f64(),
                start.as_secs_f64()
            ),
            None => format!("{:.1} s", m.effective.as_secs_f64()),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.3} ({}) | {:.3} | {effective} | {} -> {} | {ratio} | {} keys: {} |\n",
            m.what,
            m.replicas,
            m.objects_changed,
            m.writes.objects(),
            largest as f64 / full_list.max(1) as f64,
            mib(largest),
            LIST_AIM / m.replicas as f64,
            ms(m.unmoved_before),
            ms(m.unmoved_after),
            m.moved_keys,
            ms(m.moved_after),
        ));
    }
    out.push_str(&format!(
        "\nA write request that changes nothing (an apply the API server finds a no-op) leaves the resourceVersion alone.\nAims: no object write; bytes at most {LIST_AIM}/N of a full list; a graceful move effective within {} s; unmoved p99 within {:.0}% of before.\n",
        EFFECTIVE_AIM.as_secs(),
        (P99_AIM - 1.0) * 100.0
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(pairs: &[(&str, &str)]) -> Listed {
        Listed {
            bytes: 0,
            versions: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn an_object_changed_gone_or_new_counts_and_one_left_alone_does_not() {
        let before = listed(&[("a", "1"), ("b", "2"), ("c", "3")]);
        assert_eq!(
            changed(&before, &listed(&[("a", "1"), ("b", "2"), ("c", "3")])),
            0
        );
        assert_eq!(
            changed(&before, &listed(&[("a", "1"), ("b", "9"), ("d", "4")])),
            3
        );
    }

    #[test]
    fn a_log_lines_time_is_its_first_word() {
        let line =
            "2026-12-07T16:41:48.571491Z  INFO reconciler_host::sharding::coordinator: every one";
        assert_eq!(
            stamp(line).map(|t| t.to_string()),
            Some("2026-12-07T16:41:48.571491Z".to_string())
        );
        assert_eq!(stamp("no time here"), None);
    }
}
