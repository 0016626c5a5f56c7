//! A memory cgroup of the bench's own, one per replica, as a pod's
//! `limits.memory` makes one: cgroup v2's `memory.max` where the unified
//! hierarchy is mounted at `/sys/fs/cgroup`, v1's `memory.limit_in_bytes`
//! otherwise. A process is put in it by the shell that then execs it
//! ([`MemoryCgroup::procs`]), so all its memory is charged to it from the
//! start. Removed when dropped (once its processes are gone).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

const ROOT: &str = "/sys/fs/cgroup";

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

pub struct MemoryCgroup {
    dir: PathBuf,
    version: Version,
}

impl MemoryCgroup {
    /// A new cgroup `name` holding at most `limit_bytes`.
    pub fn create(name: &str, limit_bytes: u64) -> anyhow::Result<Self> {
        let root = Path::new(ROOT);
        let (dir, version) = if root.join("cgroup.controllers").is_file() {
            let controllers = std::fs::read_to_string(root.join("cgroup.controllers"))?;
            if !controllers.split_whitespace().any(|c| c == "memory") {
                bail!("cgroup v2 at {ROOT} has no memory controller");
            }
            // Children get the memory controller only when asked for.
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
            (root.join(name), Version::V2)
        } else if root.join("memory").is_dir() {
            (root.join("memory").join(name), Version::V1)
        } else {
            bail!("no memory cgroup controller under {ROOT} (v1 or v2)");
        };
        if dir.exists() {
            // Left by an interrupted run: empty, or rmdir refuses.
            let _ = std::fs::remove_dir(&dir);
        }
        std::fs::create_dir(&dir).with_context(|| {
            format!(
                "creating the memory cgroup {} (the capacity run needs root)",
                dir.display()
            )
        })?;
        let cgroup = MemoryCgroup { dir, version };
        let (file, value) = match version {
            Version::V2 => ("memory.max", limit_bytes.to_string()),
            Version::V1 => ("memory.limit_in_bytes", limit_bytes.to_string()),
        };
        std::fs::write(cgroup.dir.join(file), &value)
            .with_context(|| format!("writing {value} to {}", cgroup.dir.join(file).display()))?;
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
