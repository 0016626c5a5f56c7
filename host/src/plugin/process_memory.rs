//! How much memory this process may use, to size the guest memory budget
//! when the operator does not (`--plugin-memory-total-mib`).
//!
//! In a pod, the limit is the container's cgroup: cgroup v2's `memory.max`
//! on current clusters, v1's `memory.limit_in_bytes` on older nodes (these
//! build machines too). Both are read, for the process's own cgroup as
//! `/proc/self/cgroup` names it and every cgroup above it, since a parent's
//! limit binds its children; inside a container the cgroup filesystem is
//! often mounted at the process's own cgroup, so the mount's root counts as
//! well. Without any limit, physical memory is what there is.

use std::path::{Path, PathBuf};

/// Where the host reads from: the real files, or a test's copy of them.
#[derive(Clone, Debug)]
pub struct MemorySources {
    /// The contents of `/proc/self/cgroup`.
    pub self_cgroup: String,
    /// Where the cgroup filesystem is mounted (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// The contents of `/proc/meminfo`.
    pub meminfo: String,
}

impl MemorySources {
    pub fn of_this_process() -> Self {
        Self {
            self_cgroup: std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            meminfo: std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
        }
    }

    /// The lowest cgroup memory limit over this process, if any.
    pub fn cgroup_limit(&self) -> Option<u64> {
        let mut limits = Vec::new();
        for line in self.self_cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (dir, file) = if controllers.is_empty() {
                (self.cgroup_root.clone(), "memory.max")
            } else if controllers.split(',').any(|c| c == "memory") {
                (self.cgroup_root.join("memory"), "memory.limit_in_bytes")
            } else {
                continue;
            };
            limits.extend(ancestors(&dir, path).filter_map(|d| read_limit(&d.join(file))));
        }
        // v1 writes "no limit" as a page-rounded i64::MAX.
        let physical = self.physical().unwrap_or(u64::MAX);
        limits.into_iter().filter(|l| *l < physical).min()
    }

    /// `MemTotal` of `/proc/meminfo`, in bytes.
    pub fn physical(&self) -> Option<u64> {
        let line = self.meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// `root` joined with `path` and each of its parents, down to `root`
/// itself.
fn ancestors<'a>(root: &'a Path, path: &'a str) -> impl Iterator<Item = PathBuf> + 'a {
    let relative = Path::new(path.trim_start_matches('/'));
    relative.ancestors().map(move |p| root.join(p))
}

fn read_limit(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(dir: &Path, self_cgroup: &str) -> MemorySources {
        MemorySources {
            self_cgroup: self_cgroup.into(),
            cgroup_root: dir.to_path_buf(),
            meminfo: "MemTotal:       8000000 kB\nMemFree: 1 kB\n".into(),
        }
    }

    fn write(dir: &Path, file: &str, text: &str) {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_v2_limit_is_read_from_the_process_cgroup_or_above_it() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "kubepods/pod1/memory.max", "max\n");
        write(dir.path(), "kubepods/memory.max", "268435456\n");
        let found = sources(dir.path(), "0::/kubepods/pod1\n");
        assert_eq!(found.cgroup_limit(), Some(256 << 20), "the parent's limit");
        write(dir.path(), "kubepods/pod1/memory.max", "134217728\n");
        assert_eq!(found.cgroup_limit(), Some(128 << 20), "the lower one");
    }

    #[test]
    fn a_v1_limit_counts_and_v1_unlimited_does_not() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "memory/job/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        let found = sources(dir.path(), "4:memory:/job\n2:cpu,cpuacct:/job\n");
        assert_eq!(found.cgroup_limit(), None);
        assert_eq!(found.physical(), Some(8_000_000 * 1024));
        // Mounted at the container's own cgroup: only the root's file.
        write(dir.path(), "memory/memory.limit_in_bytes", "536870912\n");
        assert_eq!(found.cgroup_limit(), Some(512 << 20));
    }
}
