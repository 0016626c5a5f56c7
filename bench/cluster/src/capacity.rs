//! `bench-cluster scale --memory-limit-mib`: capacity under a memory limit,
//! as pods with `limits.memory` have it. Each replica runs in a memory
//! cgroup of its own (see `cgroup`), so the host derives its cache
//! budget from that limit as it would in a pod (`fleet/cache_budget.rs`).
//! First one replica alone: the cluster holds more than its budget, so it
//! must pause with a clear status (the metric, the log line) and not be
//! OOM-killed. Then three replicas under the same limit each: together
//! they must hold every object, none paused, none killed. The capacity
//! ratio is what three held against what one may hold (its budget).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reconciler_host::fleet::cache_budget::{BYTES_PER_OBJECT, IDLE_BYTES, objects_within};

use crate::replicas::mib;
use crate::scale::{Fleet, FleetSetup, Limits};

fn memory(limit: u64) -> Limits {
    Limits {
        memory: Some(limit),
        cpu: None,
    }
}

/// The replicas of the second run.
const REPLICAS: usize = 3;

/// What three replicas are to hold against one's budget: above the issue's
/// 2.7, below 1/0.345 (the largest share at three replicas, so each
/// share fits its replica's budget).
const OBJECTS_PER_BUDGET: f64 = 2.8;

/// The memory limit whose derived budget is `objects` / 2.8.
pub fn limit_for(objects: u64) -> u64 {
    let budget = (objects as f64 / OBJECTS_PER_BUDGET).floor() as u64;
    let limit = 2 * (IDLE_BYTES + budget * BYTES_PER_OBJECT);
    // Whole MiB, rounded down: the budget stays at most objects / 2.8.
    limit >> 20 << 20
}

/// One replica's figures at the end of its run.
struct Held {
    cached: u64,
    paused: u64,
    peak: Option<u64>,
    oom_kills: Option<u64>,
}

pub async fn run(
    setup: &FleetSetup<'_>,
    podsets: usize,
    limit: u64,
    quiet: Duration,
    timeout: Duration,
) -> anyhow::Result<String> {
    let objects = 2 * podsets as u64;
    let budget = objects_within(limit) as u64;
    eprintln!(
        "[capacity] each replica under a memory limit of {}: a cache budget of {budget} objects; the cluster holds {objects}",
        mib(limit)
    );
    if budget >= objects {
        bail!(
            "a limit of {} lets one replica cache all {objects} objects: give a smaller --memory-limit-mib (0 picks one)",
            mib(limit)
        );
    }

    // One replica: over its budget, it must pause, alive.
    let mut alone = Fleet::start_limited(setup, 1, true, "capacity1", memory(limit))?;
    let paused_after = wait_paused(&mut alone, timeout).await?;
    let said = budget_line(&alone)?;
    let version = alone
        .cgroups
        .first()
        .map_or("?".to_string(), |c| c.version().to_string());
    let one = held(&alone)?.pop().context("the replica's figures")?;
    alone.stop()?;
    drop(alone);

    // Three replicas: each holds its share, within its budget.
    let mut three = Fleet::start_limited(setup, REPLICAS, true, "capacity3", memory(limit))?;
    let settled = three
        .settle(podsets, quiet, timeout)
        .await
        .context("three replicas under the memory limit")?;
    let all = held(&three)?;
    three.stop()?;

    let total: u64 = all.iter().map(|h| h.cached).sum();
    let paused: u64 = all.iter().map(|h| h.paused).sum();
    let kills: u64 = all.iter().filter_map(|h| h.oom_kills).sum();
    let largest_peak = all.iter().filter_map(|h| h.peak).max();
    let largest_held = all.iter().map(|h| h.cached).max().unwrap_or_default();
    let ratio = total as f64 / budget as f64;
    let row = |side: &str, held: u64, paused: u64, kills: Option<u64>, peak: Option<u64>| {
        format!(
            "| {side} | {} | {budget} | {held} | {paused} | {} | {} |",
            mib(limit),
            kills.map_or("n/a".into(), |k| k.to_string()),
            peak.map_or("n/a".into(), |p| format!(
                "{} ({:.0}% of the limit)",
                mib(p),
                100.0 * p as f64 / limit as f64
            )),
        )
    };
    Ok(format!(
        "| side | memory limit, each | cache budget, each | objects held | paused | OOM kills | peak memory (cgroup), largest |\n\
         |---|---|---|---|---|---|---|\n\
         {}\n\
         {}\n\n\
         Memory cgroup {version}. One replica paused {:.1} s after its start, alive; it said: {said}\n\
         Three replicas settled after {:.1} s, holding {total} objects (largest share {largest_held}): \
         {ratio:.2}x the {budget} objects one replica may hold (aim: at least 2.7x).",
        row("1 replica", one.cached, one.paused, one.oom_kills, one.peak),
        row(
            &format!("{REPLICAS} replicas"),
            total,
            paused,
            Some(kills),
            largest_peak
        ),
        paused_after.as_secs_f64(),
        settled.as_secs_f64(),
    ))
}

/// Waits until the replica reports its cluster paused; an error if it
/// exits (an OOM kill shows as its death) or never pauses.
async fn wait_paused(fleet: &mut Fleet, timeout: Duration) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        fleet.check_running()?;
        if let Ok(scraped) = fleet.scrape()
            && scraped.iter().any(|s| s.paused > 0)
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!(
                "one replica over its cache budget did not pause within {} s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The replica's own words on the pause, from its log.
fn budget_line(fleet: &Fleet) -> anyhow::Result<String> {
    let log = &fleet.logs()[0];
    let text = std::fs::read_to_string(log)?;
    let line = text
        .lines()
        .find(|l| l.contains("paused:"))
        .with_context(|| format!("no pause in {}", log.display()))?;
    let said = line
        .split_once("paused:")
        .map_or(line, |(_, rest)| rest)
        .split("; its watches")
        .next()
        .unwrap_or_default()
        .trim();
    Ok(format!("\"paused: {said}\""))
}

fn held(fleet: &Fleet) -> anyhow::Result<Vec<Held>> {
    let scraped = fleet.scrape()?;
    Ok(scraped
        .iter()
        .zip(&fleet.cgroups)
        .map(|(s, cgroup)| Held {
            cached: s.podsets + s.deployments,
            paused: s.paused,
            peak: cgroup.peak_bytes(),
            oom_kills: cgroup.oom_kills(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_picked_limit_gives_a_budget_of_at_most_the_objects_over_2_8() {
        for objects in [30_000, 100_000, 250_000] {
            let budget = objects_within(limit_for(objects)) as f64;
            let ratio = objects as f64 / budget;
            assert!((2.8..2.9).contains(&ratio), "{objects}: {ratio}");
        }
    }
}
