//! Cgroups of the bench's own, one per replica, as a pod's limits make
//! them: `limits.memory` a memory cgroup, `limits.cpu` a CFS quota. Under
//! cgroup v2 (the unified hierarchy mounted at `/sys/fs/cgroup`) both are
//! files of one directory per cgroup; under v1 each controller has its own
//! hierarchy. A process is put in them by the shell that then execs it
//! (see `HostSetup::in_cgroup`), so all it does is charged from the start.
//! Each is removed when dropped (once its processes are gone).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

const ROOT: &str = "/sys/fs/cgroup";

/// The CFS period of a CPU quota: the kubelet's (100 ms).
const CPU_PERIOD_US: u64 = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// A new, empty cgroup `name` of `controller` (`memory`, `cpu`).
fn make(controller: &str, name: &str) -> anyhow::Result<(PathBuf, Version)> {
    let root = Path::new(ROOT);
    let (dir, version) = if root.join("cgroup.controllers").is_file() {
        let controllers = std::fs::read_to_string(root.join("cgroup.controllers"))?;
        if !controllers.split_whitespace().any(|c| c == controller) {
            bail!("cgroup v2 at {ROOT} has no {controller} controller");
        }
        // Children get a controller only when asked for.
        let _ = std::fs::write(
            root.join("cgroup.subtree_control"),
            format!("+{controller}"),
        );
        (root.join(name), Version::V2)
    } else if root.join(controller).is_dir() {
        (root.join(controller).join(name), Version::V1)
    } else {
        bail!("no {controller} cgroup controller under {ROOT} (v1 or v2)");
    };
    if dir.exists() {
        // Left by an interrupted run: empty, or rmdir refuses.
        let _ = std::fs::remove_dir(&dir);
    }
    std::fs::create_dir(&dir).with_context(|| {
        format!(
            "creating the {controller} cgroup {} (limits need root)",
            dir.display()
        )
    })?;
    Ok((dir, version))
}

fn write(dir: &Path, file: &str, value: &str) -> anyhow::Result<()> {
    std::fs::write(dir.join(file), value)
        .with_context(|| format!("writing {value} to {}", dir.join(file).display()))
}

pub struct MemoryCgroup {
    dir: PathBuf,
    version: Version,
}

impl MemoryCgroup {
    /// A new cgroup `name` holding at most `limit_bytes`.
    pub fn create(name: &str, limit_bytes: u64) -> anyhow::Result<Self> {
        let (dir, version) = make("memory", name)?;
        let cgroup = MemoryCgroup { dir, version };
        let file = match version {
            Version::V2 => "memory.max",
            Version::V1 => "memory.limit_in_bytes",
        };
        write(&cgroup.dir, file, &limit_bytes.to_string())?;
        if version == Version::V2 {
            // As a pod without swap: the limit is the memory it has.
            let _ = std::fs::write(cgroup.dir.join("memory.swap.max"), "0");
        }
        Ok(cgroup)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// The file a process writes its pid to to join.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The most memory charged to it at once since it was made.
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// How many processes the kernel killed in it for memory.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A CPU cgroup whose processes get at most a quota of a core per CFS
/// period, as `limits.cpu` makes one.
pub struct CpuCgroup {
    dir: PathBuf,
    version: Version,
}

/// How often the quota held a cgroup back, from its `cpu.stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttling {
    pub periods: u64,
    pub throttled: u64,
}

impl CpuCgroup {
    /// A new cgroup `name` whose processes run at most `cores` (0.2: a
    /// fifth of one core) per period.
    pub fn create(name: &str, cores: f64) -> anyhow::Result<Self> {
        if cores.is_nan() || cores <= 0.0 {
            bail!("a CPU quota must be above 0 cores, not {cores}");
        }
        let quota = quota_us(cores);
        let (dir, version) = make("cpu", name)?;
        let cgroup = CpuCgroup { dir, version };
        match version {
            Version::V2 => write(&cgroup.dir, "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?,
            Version::V1 => {
                write(&cgroup.dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                write(&cgroup.dir, "cpu.cfs_quota_us", &quota.to_string())?;
            }
        }
        Ok(cgroup)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// The file a process writes its pid to to join.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Periods so far, and those in which the quota ran out.
    pub fn throttling(&self) -> Option<Throttling> {
        let text = std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
        parse_throttling(&text)
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The quota of `cores` per period, in microseconds (at least 1 ms, the
/// kernel's least).
fn quota_us(cores: f64) -> u64 {
    ((cores * CPU_PERIOD_US as f64).round() as u64).max(1_000)
}

/// `nr_periods` and `nr_throttled` of a `cpu.stat` (the same names in v1
/// and v2).
fn parse_throttling(text: &str) -> Option<Throttling> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    Some(Throttling {
        periods: field("nr_periods ")?,
        throttled: field("nr_throttled ")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifth_of_a_core_is_twenty_milliseconds_of_each_hundred() {
        assert_eq!(quota_us(0.2), 20_000);
        assert_eq!(quota_us(1.5), 150_000);
        assert_eq!(quota_us(0.001), 1_000, "the kernel's least");
    }

    #[test]
    fn throttling_is_read_from_v1_and_v2_cpu_stat() {
        let v1 = "nr_periods 120\nnr_throttled 7\nthrottled_time 91000000\n";
        let v2 = "usage_usec 5\nuser_usec 3\nsystem_usec 2\nnr_periods 40\nnr_throttled 9\nthrottled_usec 1200\n";
        assert_eq!(
            parse_throttling(v1),
            Some(Throttling {
                periods: 120,
                throttled: 7
            })
        );
        assert_eq!(
            parse_throttling(v2),
            Some(Throttling {
                periods: 40,
                throttled: 9
            })
        );
        assert_eq!(parse_throttling("usage_usec 5\n"), None);
    }
}
