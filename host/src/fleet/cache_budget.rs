//! How many objects one member's cache may hold before the member pauses
//! (`run --member-cache-max-objects`), and where that bound came from.
//!
//! Given, it is what the operator said. Not given, it follows the memory
//! the host may use: under a cgroup memory limit (a pod's), the half of
//! the limit the guest budget leaves to the host itself (see
//! [`default_memory_total_bytes`](crate::plugin::limits::default_memory_total_bytes)),
//! less the idle process, divided by what one cached object costs. So a
//! replica whose share outgrows its pod pauses with a clear status, and is
//! not OOM-killed by the kubelet and restarted into the same list. Without
//! a limit, the fixed default.

use std::fmt;

use crate::plugin::limits::guest_share_of_limit;
use crate::plugin::process_memory::MemorySources;

/// The default bound without a memory limit: far more than a healthy
/// member caches, far less than takes a process down.
pub const DEFAULT_MAX_OBJECTS: usize = 500_000;

/// What one cached object is taken to cost in the host's resident memory,
/// with its share of the watch, the decode and the allocator. A PodSet or a
/// Deployment costs about 5.3 KiB (BENCHMARKS.md, "Sharding at scale": one
/// host holding 100,000 of them); half as much again is the margin for
/// larger objects and for the list being decoded.
pub const BYTES_PER_OBJECT: u64 = 8 << 10;

/// What the host holds before it caches anything (about 30 MiB measured,
/// with room for its Tokio tasks and the plugins' compiled code).
pub const IDLE_BYTES: u64 = 64 << 20;

/// The fewest objects a derived bound allows: below it the limit is too
/// small to be worth following, and a tiny pod would pause on any cluster.
pub const MIN_DERIVED_OBJECTS: usize = 1_000;

/// A member's cache bound and its origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheBudget {
    pub max_objects: usize,
    pub origin: Origin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `--member-cache-max-objects N`.
    Given,
    /// Not given, and no memory limit: [`DEFAULT_MAX_OBJECTS`].
    Default,
    /// Not given: derived from a cgroup memory limit of this many bytes.
    MemoryLimit { limit_bytes: u64 },
}

impl CacheBudget {
    pub fn given(max_objects: usize) -> Self {
        Self {
            max_objects,
            origin: Origin::Given,
        }
    }

    /// The bound when none is given, from the memory `sources` tell of.
    pub fn derived(sources: &MemorySources) -> Self {
        match sources.cgroup_limit() {
            Some(limit_bytes) => Self {
                max_objects: objects_within(limit_bytes),
                origin: Origin::MemoryLimit { limit_bytes },
            },
            None => Self {
                max_objects: DEFAULT_MAX_OBJECTS,
                origin: Origin::Default,
            },
        }
    }
}

/// The objects a host under a memory limit of `limit_bytes` may cache.
pub fn objects_within(limit_bytes: u64) -> usize {
    let host_share = limit_bytes - guest_share_of_limit(limit_bytes);
    let for_objects = host_share.saturating_sub(IDLE_BYTES);
    usize::try_from(for_objects / BYTES_PER_OBJECT)
        .unwrap_or(usize::MAX)
        .clamp(MIN_DERIVED_OBJECTS, DEFAULT_MAX_OBJECTS)
}

impl fmt::Display for CacheBudget {
    /// As the pause's message names it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = self.max_objects;
        match self.origin {
            Origin::Given => write!(f, "--member-cache-max-objects ({max})"),
            Origin::Default => write!(f, "the default --member-cache-max-objects ({max})"),
            Origin::MemoryLimit { limit_bytes } => write!(
                f,
                "the {max} objects its memory limit of {} MiB allows (half of it for the host, {} KiB an object; set --member-cache-max-objects to choose)",
                limit_bytes >> 20,
                BYTES_PER_OBJECT >> 10
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn sources(dir: &Path, limit: Option<&str>) -> MemorySources {
        if let Some(limit) = limit {
            let cgroup = dir.join("memory/pod");
            std::fs::create_dir_all(&cgroup).unwrap();
            std::fs::write(cgroup.join("memory.limit_in_bytes"), limit).unwrap();
        }
        MemorySources {
            self_cgroup: "4:memory:/pod\n".into(),
            cgroup_root: dir.to_path_buf(),
            meminfo: "MemTotal:       8000000 kB\n".into(),
        }
    }

    #[test]
    fn under_a_memory_limit_the_bound_is_what_half_of_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        // 1 GiB: 512 MiB for the host, 448 MiB of it for objects.
        let budget = CacheBudget::derived(&sources(dir.path(), Some("1073741824\n")));
        assert_eq!(budget.max_objects, 448 * 1024 / 8);
        assert_eq!(
            budget.origin,
            Origin::MemoryLimit {
                limit_bytes: 1 << 30
            }
        );
        let said = budget.to_string();
        assert!(
            said.contains("memory limit of 1024 MiB") && said.contains("57344"),
            "{said}"
        );
    }

    #[test]
    fn a_tiny_limit_keeps_a_floor_and_no_limit_keeps_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let tiny = CacheBudget::derived(&sources(dir.path(), Some("67108864\n")));
        assert_eq!(tiny.max_objects, MIN_DERIVED_OBJECTS);
        let none = tempfile::tempdir().unwrap();
        let unlimited = CacheBudget::derived(&sources(none.path(), None));
        assert_eq!(unlimited.max_objects, DEFAULT_MAX_OBJECTS);
        assert_eq!(unlimited.origin, Origin::Default);
        // A limit above what the machine has is no limit.
        let big = tempfile::tempdir().unwrap();
        let above = CacheBudget::derived(&sources(big.path(), Some("9223372036854771712\n")));
        assert_eq!(above.origin, Origin::Default);
    }

    #[test]
    fn a_huge_limit_is_capped_at_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let meminfo_64g = MemorySources {
            meminfo: "MemTotal:       67108864 kB\n".into(),
            ..sources(dir.path(), Some("34359738368\n"))
        };
        let budget = CacheBudget::derived(&meminfo_64g);
        assert_eq!(budget.max_objects, DEFAULT_MAX_OBJECTS);
    }
}
