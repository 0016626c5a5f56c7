//! Measuring in a child process, shared by the benches that do
//! (`cache_memory`, `embedded_converge`).
//!
//! A bench binary runs itself again with `--child ARGS` once per
//! measurement, so what one measurement allocated cannot linger in the next
//! and each child's peak RSS (VmHWM) is its own. The child prints one line
//! `MEASURED key=value ...` (whole numbers) on stdout; the parent reads it
//! back with [`run_child`].

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};

/// What a child measured, by key.
pub type Measured = HashMap<String, u64>;

/// Runs this binary again as `--child args...` and returns the figures it
/// printed; `label` names the child in errors.
pub fn run_child(label: &str, args: &[String]) -> anyhow::Result<Measured> {
    let output = Command::new(std::env::current_exe()?)
        .arg("--child")
        .args(args)
        .output()
        .with_context(|| format!("running child {label}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "child {label} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("MEASURED "))
        .with_context(|| format!("child {label} printed no figures"))?;
    let mut measured = Measured::new();
    for pair in line.split_whitespace() {
        let (k, v) = pair.split_once('=').context("key=value")?;
        measured.insert(k.to_string(), v.parse()?);
    }
    Ok(measured)
}

/// Prints the child's figures as the line [`run_child`] reads.
pub fn print_measured(figures: &[(&str, u64)]) {
    let line: Vec<String> = figures.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("MEASURED {}", line.join(" "));
}

/// VmRSS, VmHWM, RssAnon, RssFile and the like, in kB.
pub fn proc_status() -> anyhow::Result<HashMap<String, u64>> {
    let text = std::fs::read_to_string("/proc/self/status")?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (key, rest) = line.split_once(':')?;
            let kb = rest.trim().strip_suffix(" kB")?.parse().ok()?;
            Some((key.to_string(), kb))
        })
        .collect())
}

/// One key of [`proc_status`], or an error naming it.
pub fn proc_status_kb(status: &HashMap<String, u64>, key: &str) -> anyhow::Result<u64> {
    status
        .get(key)
        .copied()
        .with_context(|| format!("{key} in /proc/self/status"))
}

/// The process's CPU time so far, all threads.
#[allow(dead_code)] // cache_memory does not measure CPU time
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

#[allow(dead_code)]
impl CpuTime {
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

#[allow(dead_code)]
pub fn cpu_time() -> anyhow::Result<CpuTime> {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    ensure!(rc == 0, "getrusage: {}", std::io::Error::last_os_error());
    let of = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    Ok(CpuTime {
        user: of(usage.ru_utime),
        system: of(usage.ru_stime),
    })
}

/// The median and range of one figure over the runs.
#[allow(dead_code)] // cache_memory reports single runs
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

#[allow(dead_code)]
impl Spread {
    pub fn show(&self, decimals: usize) -> String {
        let median = format!("{:.*}", decimals, self.median);
        let (min, max) = (
            format!("{:.*}", decimals, self.min),
            format!("{:.*}", decimals, self.max),
        );
        if min == max {
            median
        } else {
            format!("{median} [{min}-{max}]")
        }
    }
}

#[allow(dead_code)]
pub fn spread(measured: &[Measured], figure: impl Fn(&Measured) -> f64) -> Spread {
    let mut values: Vec<f64> = measured.iter().map(figure).collect();
    values.sort_by(f64::total_cmp);
    Spread {
        median: values[values.len() / 2],
        min: values[0],
        max: values[values.len() - 1],
    }
}
