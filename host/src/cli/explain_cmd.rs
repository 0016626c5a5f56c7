//! `reconciler-host explain KIND/[NAMESPACE/]NAME`: why a running host
//! reconciled an object, what it did, and how it ended, from the host's
//! decision journal (`/objects/...` on its metrics port, or on `dev`'s
//! loopback port); with `--as-case`, its last reconcile as a golden case.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};

use crate::engine::journal::{Entry, Kept};
use crate::golden::record_dir::RecordDir;
use crate::support::duration_text::format_duration_for_people;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The object: KIND/NAMESPACE/NAME, or KIND/NAME for a cluster-scoped one (the kind by
    /// its name, any case: podset/default/web).
    #[arg(value_name = "KIND/[NAMESPACE/]NAME")]
    pub object: String,
    /// The host's metrics port: https://POD:8444 (or http:// with --metrics-insecure); by
    /// default a `dev` running on this machine (its --explain-listen).
    #[arg(long, value_name = "URL", default_value = DEV_EXPLAIN_URL)]
    pub host: String,
    /// A file holding the bearer token to send (one the API server lets `get` /objects/*, as
    /// deploy/metrics-reader.yaml grants); RECONCILER_HOST_TOKEN holds the token itself.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// The CA that signed the host's serving certificate (PEM), beside the system's.
    #[arg(long, value_name = "PATH")]
    pub ca_file: Option<PathBuf>,
    /// Do not check the host's certificate (a self-signed one, on a trusted network).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Only the reconciles of this member cluster (default: every cluster's).
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// `text` for people, `json` for tools.
    #[arg(long, short, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// Write the object's last reconcile as a golden case instead, as DIR/<plugin>/<number>-<name>.yaml
    /// (numbered on as `--record` numbers its cases, never over one): its inputs exactly as the
    /// plugin saw them (Secret values redacted) and the decision it made, so
    /// `reconciler-host test plugins/<plugin>.wasm DIR/<plugin>` replays it against any version
    /// of the plugin.
    #[arg(long, value_name = "DIR")]
    pub as_case: Option<PathBuf>,
}

/// Where `explain` asks by default: `dev`'s journal
/// ([`crate::process::dev::DEV_EXPLAIN_ADDR`]).
const DEV_EXPLAIN_URL: &str = "http://127.0.0.1:8471";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// The object named on the command line.
#[derive(Debug, PartialEq, Eq)]
struct Named<'a> {
    kind: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
}

impl<'a> Named<'a> {
    fn parse(text: &'a str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            bail!(
                "{text:?} has an empty part: name the object as KIND/NAMESPACE/NAME or KIND/NAME"
            );
        }
        match parts[..] {
            [kind, name] => Ok(Self {
                kind,
                namespace: None,
                name,
            }),
            [kind, namespace, name] => Ok(Self {
                kind,
                namespace: Some(namespace),
                name,
            }),
            _ => {
                bail!("{text:?} is not KIND/NAMESPACE/NAME or KIND/NAME (e.g. podset/default/web)")
            }
        }
    }

    fn path(&self) -> String {
        match self.namespace {
            Some(namespace) => format!("/objects/{}/{namespace}/{}", self.kind, self.name),
            None => format!("/objects/{}/{}", self.kind, self.name),
        }
    }
}

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace {
            Some(namespace) => write!(f, "{} {namespace}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

pub fn run(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let named = Named::parse(&args.object)?;
    let token = match &args.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --token-file {}", path.display()))?
                .trim()
                .to_string(),
        ),
        None => std::env::var("RECONCILER_HOST_TOKEN").ok(),
    };
    let mut client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .tls_danger_accept_invalid_certs(args.insecure_skip_tls_verify);
    if let Some(path) = &args.ca_file {
        let pem =
            std::fs::read(path).with_context(|| format!("reading --ca-file {}", path.display()))?;
        let ca = reqwest::Certificate::from_pem(&pem)
            .with_context(|| format!("--ca-file {} is not a PEM certificate", path.display()))?;
        client = client.tls_certs_merge([ca]);
    }
    let client = client.build().context("building the HTTP client")?;
    let url = format!("{}{}", args.host.trim_end_matches('/'), named.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (code, body) = runtime.block_on(async {
        let mut request = client.get(&url);
        if let Some(cluster) = &args.cluster {
            request = request.query(&[("cluster", cluster)]);
        }
        if args.as_case.is_some() {
            request = request.query(&[("as", "case")]);
        }
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.with_context(|| {
            if args.host == DEV_EXPLAIN_URL {
                format!("asking {url} (a `reconciler-host dev` running here; give --host for a host elsewhere)")
            } else {
                format!("asking {url}")
            }
        })?;
        let code = response.status();
        let body = response.text().await.context("reading the answer")?;
        anyhow::Ok((code, body))
    })?;
    if !code.is_success() {
        eprintln!("{url}: {code}: {}", body.trim_end());
        return Ok(ExitCode::from(1));
    }
    if let Some(dir) = &args.as_case {
        let kept: Kept = serde_json::from_str(&body)
            .with_context(|| format!("{url} answered something other than a case"))?;
        let path = write_case(dir, &kept)?;
        println!(
            "wrote {}
replay it: reconciler-host test plugins/{}.wasm {}",
            path.display(),
            kept.plugin,
            dir.join(&kept.plugin).display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let entries: Vec<Entry> = serde_json::from_str(&body)
        .with_context(|| format!("{url} answered something other than a journal"))?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&entries)?),
        Output::Text => print!("{}", for_people(&named.to_string(), &entries)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `kept` into DIR as `--record` writes its cases
/// (`DIR/<plugin>/<number>-<name>.yaml`, never over another, readable by
/// this user only), so a directory of recorded cases takes it as one more;
/// returns its path.
fn write_case(dir: &std::path::Path, kept: &Kept) -> anyhow::Result<PathBuf> {
    let case: serde_json::Value =
        serde_json::from_str(&kept.case).context("the case the host sent is not JSON")?;
    let text = serde_yaml_ng::to_string(&case)?;
    // Names from the host's answer: never a path out of DIR.
    let safe = |s: &str| -> String {
        let name: String = s
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        match name.strip_prefix('.') {
            Some(rest) => format!("_{rest}"),
            None if name.is_empty() => "_".to_string(),
            None => name,
        }
    };
    // No budget: a person asked for this one case.
    let cases = RecordDir::open(dir, u64::MAX)
        .with_context(|| format!("opening {} for the case", dir.display()))?;
    Ok(cases.write(&safe(&kept.plugin), &safe(&kept.name), &text)?)
}

/// The journal of `object` for a person: newest first, one block per
/// reconcile: when, which plugin version on which cluster, how long and how
/// it ended; why it ran; what it did; what comes next.
fn for_people(object: &str, entries: &[Entry]) -> String {
    let mut out = format!(
        "{object}: the last {} reconcile(s), newest first\n",
        entries.len()
    );
    for entry in entries {
        let at = k8s_openapi::jiff::Timestamp::from_millisecond(entry.at_millis)
            .map_or_else(|_| entry.at_millis.to_string(), |t| t.to_string());
        let digest = entry.digest.get(..12).unwrap_or(&entry.digest);
        out.push_str(&format!(
            "\n{at}  {} {} ({digest}) on {}, {} ms: {}\n",
            entry.plugin, entry.version, entry.cluster, entry.took_millis, entry.outcome
        ));
        let mut why = entry.trigger.join("; ");
        if why.is_empty() {
            why = "unknown".into();
        }
        if entry.more_triggers > 0 {
            why.push_str(&format!(" (and {} more)", entry.more_triggers));
        }
        out.push_str(&format!("  why:  {why}\n"));
        if !entry.reads.is_empty() {
            out.push_str(&format!("  read: {}\n", entry.reads.join("; ")));
        }
        if let Some(failure) = &entry.failure {
            out.push_str(&format!("  failed: {failure}\n"));
        } else if entry.changes.is_empty() {
            out.push_str("  did:  nothing (the cluster held what the plugin decided)\n");
        } else {
            out.push_str(&format!("  did:  {}\n", entry.changes.join("; ")));
        }
        for written in &entry.writes {
            out.push_str(&format!("  api:  {written}\n"));
        }
        if let Some(found) = &entry.reconcile_loop {
            out.push_str(&format!("  LOOP: {found}\n"));
        }
        if let Some(secs) = entry.requeue_after_secs {
            let again = format_duration_for_people(Duration::from_secs_f64(secs.max(0.0)));
            let how = if entry.failure.is_some() {
                "retried"
            } else {
                "reconciled again"
            };
            out.push_str(&format!("  next: {how} in {again}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_is_written_under_its_directory_whatever_the_host_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let kept = |plugin: &str, name: &str| Kept {
            plugin: plugin.into(),
            name: name.into(),
            case: r#"{"now": "2026-01-01T00:00:00Z", "primary": {}}"#.into(),
        };
        for (plugin, name) in [("..", ".."), ("../x", "/etc/passwd"), ("", "")] {
            let path = write_case(dir.path(), &kept(plugin, name)).unwrap();
            let inside = path.strip_prefix(dir.path()).expect("under DIR");
            assert!(
                inside
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_))),
                "{}",
                path.display()
            );
        }
        // Numbered on from the highest case anywhere under DIR, as
        // `--record` numbers them.
        let first = write_case(dir.path(), &kept("podset", "default-web")).unwrap();
        let second = write_case(dir.path(), &kept("podset", "default-web")).unwrap();
        assert_eq!(first, dir.path().join("podset/000004-default-web.yaml"));
        assert_eq!(second, dir.path().join("podset/000005-default-web.yaml"));
        let text = std::fs::read_to_string(first).unwrap();
        assert!(text.contains("now: 2026-01-01T00:00:00Z"), "{text}");
    }

    #[test]
    fn explain_asks_where_dev_serves_by_default() {
        assert_eq!(
            DEV_EXPLAIN_URL,
            format!("http://{}", crate::process::dev::DEV_EXPLAIN_ADDR)
        );
    }

    #[test]
    fn an_object_is_kind_namespace_name_or_kind_name() {
        let named = Named::parse("podset/default/web").unwrap();
        assert_eq!(named.path(), "/objects/podset/default/web");
        assert_eq!(named.to_string(), "podset default/web");
        let cluster_scoped = Named::parse("KubernetesCluster/prod").unwrap();
        assert_eq!(cluster_scoped.path(), "/objects/KubernetesCluster/prod");
        for bad in ["web", "a/b/c/d", "podset//web", ""] {
            let e = Named::parse(bad).unwrap_err().to_string();
            assert!(e.contains("KIND/NAMESPACE/NAME"), "{bad}: {e}");
        }
    }

    #[test]
    fn each_reconcile_is_a_block_saying_why_what_and_next() {
        let entry = |at: i64, failure: Option<&str>| Entry {
            at_millis: at,
            cluster: "local".into(),
            plugin: "podset".into(),
            version: "0.1.0".into(),
            digest: "4ab30664c60f0123".into(),
            trigger: vec!["Deployment default/web changed".into()],
            more_triggers: 2,
            took_millis: 7,
            outcome: if failure.is_some() {
                "failed"
            } else {
                "applied"
            }
            .into(),
            changes: if failure.is_some() {
                Vec::new()
            } else {
                vec!["status updated".into()]
            },
            requeue_after_secs: Some(4.0),
            failure: failure.map(str::to_string),
            reads: vec!["list Pod in default matching app=web: 2".into()],
            writes: if failure.is_some() {
                Vec::new()
            } else {
                vec!["apply status PodSet default/web: changed .status.ready 1 -> 2".into()]
            },
            reconcile_loop: failure.is_none().then(|| "reconciled 5 times".to_string()),
        };
        let text = for_people(
            "PodSet default/web",
            &[
                entry(1_764_930_000_000, None),
                entry(1_764_929_000_000, Some("ClusterUnavailable: timed out")),
            ],
        );
        assert!(text.starts_with("PodSet default/web: the last 2 reconcile(s), newest first\n"));
        assert!(
            text.contains("podset 0.1.0 (4ab30664c60f) on local, 7 ms: applied"),
            "{text}"
        );
        assert!(
            text.contains("  why:  Deployment default/web changed (and 2 more)\n"),
            "{text}"
        );
        assert!(
            text.contains("  read: list Pod in default matching app=web: 2\n  did:  status updated\n  api:  apply status PodSet default/web: changed .status.ready 1 -> 2\n  LOOP: reconciled 5 times\n  next: reconciled again in 4s\n"),
            "{text}"
        );
        assert!(
            text.contains("  failed: ClusterUnavailable: timed out\n  next: retried in 4s\n"),
            "{text}"
        );
    }
}
