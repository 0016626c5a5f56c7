//! CPU time and resident memory of a process, from /proc.

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;

/// User plus system CPU time of process `pid` so far (all its threads).
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}: has process {pid} exited?"))?;
    let ticks = cpu_ticks(&stat).with_context(|| format!("{path} has no utime/stime fields"))?;
    Ok(Duration::from_secs_f64(
        ticks as f64 / clock_ticks_per_second() as f64,
    ))
}

/// Resident set size of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path}: has process {pid} exited?"))?;
    let kib = rss_kib(&status).with_context(|| format!("{path} has no VmRSS line"))?;
    Ok(kib * 1024)
}

/// utime + stime (fields 14 and 15 of /proc/PID/stat), in clock ticks. The
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted from its closing parenthesis.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // after_name starts at field 3 (state): field n is fields[n - 3].
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `getconf CLK_TCK`; 100 (Linux's value on every common platform) if that fails.
fn clock_ticks_per_second() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|&ticks| ticks > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime_even_with_an_awkward_command_name() {
        let stat = "4242 (kube (api) server) S 1 4242 4242 0 -1 4194560 5000 0 0 0 \
                    1234 567 0 0 20 0 12 0 100 800000000 9000 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(1234 + 567));
        assert_eq!(cpu_ticks("4242 (truncated) S 1 2"), None);
    }

    #[test]
    fn rss_is_read_from_the_vmrss_line() {
        let status = "Name:\tbench\nVmPeak:\t  99999 kB\nVmRSS:\t   10240 kB\nThreads:\t3\n";
        assert_eq!(rss_kib(status), Some(10240));
        assert_eq!(rss_kib("Name:\tzombie\n"), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = std::process::id();
        assert!(rss_bytes(me).unwrap() > 0);
        cpu_time(me).unwrap();
    }
}
