//! The comparison table: one row per figure, the baseline (native or kopf)
//! and the host side by side, and the ratio host / baseline.

use std::time::Duration;

use crate::audit::Writes;
use crate::controller::Side;

/// What one run of one side measured.
#[derive(Clone, Debug, Default)]
pub struct SideRun {
    pub single_p50: Duration,
    pub single_p95: Duration,
    pub all_deployments: Duration,
    pub lag_p50: Duration,
    pub lag_p95: Duration,
    pub lag_p99: Duration,
    pub all_pod_names: Duration,
    pub controller_cpu: Duration,
    /// Controller CPU from the first bulk create to the moment every
    /// `status.podNames` was seen filled: the burst as a user sees it.
    pub cpu_to_pod_names: Duration,
    /// Controller CPU in the `after_secs` that follow that moment, while
    /// kube-controller-manager still updates the Deployments' status.
    pub cpu_after_pod_names: Duration,
    /// `None` when the bench did not start the API server itself.
    pub apiserver_cpu: Option<Duration>,
    /// `None` without an audit log of the bench's own.
    pub writes: Option<Writes>,
    pub rss_after: u64,
    pub idle_rss: u64,
    /// Controller CPU in the quiet seconds after it settled (`None` when
    /// the run measured none).
    pub cpu_after: Option<Duration>,
}

#[derive(Clone, Copy)]
enum Unit {
    Millis,
    Seconds,
    Count,
    Mebibytes,
}

struct Row {
    label: String,
    unit: Unit,
    value: Figure,
}

/// Reads one figure of a run; `None` if the run could not measure it.
type Figure = Box<dyn Fn(&SideRun) -> Option<f64>>;

/// The shape of the run, for the row labels.
pub struct Shape {
    pub count: usize,
    pub creators: usize,
    pub singles: usize,
    pub after_secs: u64,
}

fn rows(shape: &Shape) -> Vec<Row> {
    let n = thousands(shape.count as f64);
    fn row(label: String, unit: Unit, value: impl Fn(&SideRun) -> Option<f64> + 'static) -> Row {
        Row {
            label,
            unit,
            value: Box::new(value),
        }
    }
    fn writes(f: fn(&Writes) -> u64) -> impl Fn(&SideRun) -> Option<f64> {
        move |r: &SideRun| r.writes.as_ref().map(|w| f(w) as f64)
    }
    vec![
        row(
            format!(
                "create -> Deployment, one PodSet at a time ({}), p50",
                shape.singles
            ),
            Unit::Millis,
            |r| Some(r.single_p50.as_secs_f64()),
        ),
        row(
            "create -> Deployment, one at a time, p95".into(),
            Unit::Millis,
            |r| Some(r.single_p95.as_secs_f64()),
        ),
        row(
            format!(
                "{n} PodSets ({} concurrent creators): all Deployments",
                shape.creators
            ),
            Unit::Seconds,
            |r| Some(r.all_deployments.as_secs_f64()),
        ),
        row(
            "per-PodSet lag, create -> its Deployment, p50".into(),
            Unit::Seconds,
            |r| Some(r.lag_p50.as_secs_f64()),
        ),
        row(
            "per-PodSet lag, create -> its Deployment, p95".into(),
            Unit::Seconds,
            |r| Some(r.lag_p95.as_secs_f64()),
        ),
        row(
            "per-PodSet lag, create -> its Deployment, p99".into(),
            Unit::Seconds,
            |r| Some(r.lag_p99.as_secs_f64()),
        ),
        row(
            format!("{n} PodSets: all status.podNames filled"),
            Unit::Seconds,
            |r| Some(r.all_pod_names.as_secs_f64()),
        ),
        row(
            format!("controller CPU for the {n} (first create -> no write for 3 s)"),
            Unit::Seconds,
            |r| Some(r.controller_cpu.as_secs_f64()),
        ),
        row(
            "controller CPU, first create -> all status.podNames filled".into(),
            Unit::Seconds,
            |r| Some(r.cpu_to_pod_names.as_secs_f64()),
        ),
        row(
            format!(
                "controller CPU in the {} s after all status.podNames filled",
                shape.after_secs
            ),
            Unit::Seconds,
            |r| Some(r.cpu_after_pod_names.as_secs_f64()),
        ),
        row(
            format!("kube-apiserver CPU for the {n}"),
            Unit::Seconds,
            |r| r.apiserver_cpu.map(|d| d.as_secs_f64()),
        ),
        row(
            format!("the controller's API writes for the {n} (audit log)"),
            Unit::Count,
            writes(Writes::total),
        ),
        row(
            "- of them Deployment applies".into(),
            Unit::Count,
            writes(|w| w.deployments),
        ),
        row(
            "- of them PodSet status writes".into(),
            Unit::Count,
            writes(|w| w.podset_status),
        ),
        row("- of them Events".into(), Unit::Count, writes(|w| w.events)),
        row(
            "- of them other writes".into(),
            Unit::Count,
            writes(|w| w.other),
        ),
        row(
            "- of them refused by the API server".into(),
            Unit::Count,
            writes(|w| w.refused),
        ),
        row(
            format!(
                "controller CPU in the {} s after it settled",
                shape.after_secs
            ),
            Unit::Seconds,
            |r| r.cpu_after.map(|d| d.as_secs_f64()),
        ),
        row(
            format!("controller RSS after the {n}"),
            Unit::Mebibytes,
            |r| Some(r.rss_after as f64),
        ),
        row(
            "controller idle RSS, podset only".into(),
            Unit::Mebibytes,
            |r| Some(r.idle_rss as f64),
        ),
    ]
}

/// The table in Markdown. A side without runs shows `-`; a figure a side
/// could not measure shows `n/a`.
/// The table with the baseline (`native` or `kopf`) first.
pub fn render(shape: &Shape, baseline: Side, base: &[SideRun], host: &[SideRun]) -> String {
    let (name, host_name, ratio) = match baseline {
        Side::Kopf => ("kopf (Python)", "reconciler-host", "host / kopf"),
        Side::Host => ("host", "host with a candidate in shadow", "with / without"),
        Side::Native => ("native kube-rs", "reconciler-host", "host / native"),
    };
    let mut out = format!("| | {name} | {host_name} | {ratio} |\n|---|---|---|---|\n");
    for row in rows(shape) {
        let base_values = values(base, &row.value);
        let host_values = values(host, &row.value);
        let ratio = match (&base_values, &host_values) {
            (Some(n), Some(h)) if !n.is_empty() && !h.is_empty() && mean(n) > 0.0 => {
                format!("{:.2}x", mean(h) / mean(n))
            }
            (None, _) | (_, None) => "n/a".into(),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            row.label,
            cell(base_values.as_deref(), row.unit),
            cell(host_values.as_deref(), row.unit),
            ratio
        ));
    }
    out
}

/// The row's value in every run; `None` if any run could not measure it.
fn values(runs: &[SideRun], value: &Figure) -> Option<Vec<f64>> {
    runs.iter().map(value).collect()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// One value, or the range `min-max` over several runs.
fn cell(values: Option<&[f64]>, unit: Unit) -> String {
    let Some(values) = values else {
        return "n/a".into();
    };
    if values.is_empty() {
        return "-".into();
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi, suffix) = match unit {
        Unit::Millis => (
            format!("{:.1}", min * 1e3),
            format!("{:.1}", max * 1e3),
            " ms",
        ),
        Unit::Seconds => (format!("{min:.2}"), format!("{max:.2}"), " s"),
        Unit::Count => (thousands(min), thousands(max), ""),
        Unit::Mebibytes => (
            format!("{:.1}", min / 1048576.0),
            format!("{:.1}", max / 1048576.0),
            " MiB",
        ),
    };
    if lo == hi {
        format!("{lo}{suffix}")
    } else {
        format!("{lo}-{hi}{suffix}")
    }
}

/// `9892.0` -> `9,892`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(single_ms: u64, writes: Option<u64>) -> SideRun {
        SideRun {
            single_p50: Duration::from_millis(single_ms),
            writes: writes.map(|deployments| Writes {
                deployments,
                ..Default::default()
            }),
            idle_rss: 10 * 1048576,
            ..Default::default()
        }
    }

    fn line<'a>(table: &'a str, starts: &str) -> &'a str {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {starts}")))
            .unwrap_or_else(|| panic!("no row {starts:?} in\n{table}"))
    }

    const SHAPE: Shape = Shape {
        count: 1000,
        creators: 16,
        singles: 50,
        after_secs: 30,
    };

    #[test]
    fn a_row_shows_both_sides_and_the_ratio_of_their_means() {
        let table = render(
            &SHAPE,
            Side::Native,
            &[run(8, Some(9892)), run(10, Some(9892))],
            &[run(27, Some(4018))],
        );
        assert_eq!(
            line(
                &table,
                "create -> Deployment, one PodSet at a time (50), p50"
            ),
            "| create -> Deployment, one PodSet at a time (50), p50 | 8.0-10.0 ms | 27.0 ms | 3.00x |"
        );
        assert_eq!(
            line(&table, "the controller's API writes for the 1,000"),
            "| the controller's API writes for the 1,000 (audit log) | 9,892 | 4,018 | 0.41x |"
        );
        assert_eq!(
            line(&table, "controller idle RSS"),
            "| controller idle RSS, podset only | 10.0 MiB | 10.0 MiB | 1.00x |"
        );
    }

    #[test]
    fn the_host_as_its_own_baseline_is_named_for_its_candidate() {
        let table = render(&SHAPE, Side::Host, &[run(20, None)], &[run(10, None)]);
        assert!(
            table.starts_with("| | host | host with a candidate in shadow | with / without |"),
            "{table}"
        );
    }

    #[test]
    fn a_kopf_baseline_names_its_column_and_ratio() {
        let table = render(&SHAPE, Side::Kopf, &[run(20, None)], &[run(10, None)]);
        assert!(
            table.starts_with("| | kopf (Python) | reconciler-host | host / kopf |"),
            "{table}"
        );
        assert!(
            line(&table, "create -> Deployment, one PodSet")
                .ends_with("| 20.0 ms | 10.0 ms | 0.50x |")
        );
    }

    #[test]
    fn unmeasured_figures_say_n_a_and_a_missing_side_a_dash() {
        let table = render(&SHAPE, Side::Native, &[run(8, None)], &[]);
        assert_eq!(
            line(&table, "the controller's API writes"),
            "| the controller's API writes for the 1,000 (audit log) | n/a | - | n/a |"
        );
        assert!(line(&table, "create -> Deployment, one PodSet").ends_with("| 8.0 ms | - | - |"));
    }

    #[test]
    fn counts_get_thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1234567.0), "1,234,567");
    }
}
