//! `--clusters N`, `--cluster-objects DIR` and `--cluster-labels` of `dev`
//! and `simulate`: several embedded clusters, one per member, so a plugin
//! meant for a fleet is tried without any cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use reconciler_contract::ClusterInfo;

use crate::fleet::sources::valid_member_name;
pub use crate::process::dev::MemberSeed;

#[derive(Debug, Args, Default)]
pub struct EmbeddedClustersArgs {
    /// Run N embedded member clusters (member-1 ... member-N) instead of one, each seeded with
    /// the same objects and served by every plugin, as `run` serves the member clusters a hub
    /// names. Every output line names its cluster; plugins see theirs in ctx.cluster().
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=500), conflicts_with = "cluster_objects")]
    pub clusters: Option<u16>,
    /// One embedded member cluster per subdirectory of DIR, named after it
    /// (examples/clusters/east, examples/clusters/west): each starts from its directory's objects,
    /// besides those of --objects.
    #[arg(long, value_name = "DIR")]
    pub cluster_objects: Option<PathBuf>,
    /// Labels of a member cluster, as its kubeconfig Secret would carry them:
    /// `east:region=us-east,tier=prod` (repeatable). Plugins read them with
    /// ctx.cluster().label(...); reconciler-host.io/cluster=<name> is always among them.
    #[arg(long, value_name = "CLUSTER:K=V,...")]
    pub cluster_labels: Vec<String>,
}

impl EmbeddedClustersArgs {
    /// The members to run, in name order; `None` for the usual single
    /// cluster (`local`).
    pub fn members(&self) -> anyhow::Result<Option<Vec<MemberSeed>>> {
        let mut members: Vec<(String, Option<PathBuf>)> = match (
            &self.clusters,
            &self.cluster_objects,
        ) {
            (Some(n), _) => (1..=*n).map(|i| (format!("member-{i}"), None)).collect(),
            (None, Some(dir)) => member_dirs(dir)?
                .into_iter()
                .map(|(name, dir)| (name, Some(dir)))
                .collect(),
            (None, None) => {
                if let Some(first) = self.cluster_labels.first() {
                    anyhow::bail!(
                        "--cluster-labels {first} names a member cluster, but there is one cluster (local): add --clusters N or --cluster-objects DIR"
                    );
                }
                return Ok(None);
            }
        };
        let mut labels = self.labels()?;
        let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
        if let Some(unknown) = labels.keys().find(|k| !names.contains(k)) {
            anyhow::bail!(
                "--cluster-labels names cluster {unknown}, which is not among the clusters run ({})",
                names.join(", ")
            );
        }
        members.sort();
        Ok(Some(
            members
                .into_iter()
                .map(|(name, objects_dir)| MemberSeed {
                    info: ClusterInfo::with_labels(&name, labels.remove(&name).unwrap_or_default()),
                    objects_dir,
                })
                .collect(),
        ))
    }

    /// `--cluster-labels`, by cluster.
    fn labels(&self) -> anyhow::Result<BTreeMap<String, BTreeMap<String, String>>> {
        let mut all: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for text in &self.cluster_labels {
            let (cluster, pairs) = text.split_once(':').with_context(|| {
                format!("--cluster-labels {text:?}: expected CLUSTER:KEY=VALUE,... (east:region=us-east)")
            })?;
            let labels = all.entry(cluster.to_string()).or_default();
            for pair in pairs.split(',').filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once('=').with_context(|| {
                    format!("--cluster-labels {text:?}: {pair:?} is not KEY=VALUE")
                })?;
                if key.is_empty() {
                    anyhow::bail!("--cluster-labels {text:?}: a label needs a key");
                }
                labels.insert(key.to_string(), value.to_string());
            }
        }
        Ok(all)
    }
}

/// The subdirectories of `dir`, each a member named after it.
fn member_dirs(dir: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the cluster directory {}", dir.display()))?;
    let mut members = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        valid_member_name(&name)
            .map_err(|why| anyhow::anyhow!("{}: not a cluster name: {why}", path.display()))?;
        members.push((name, path));
    }
    if members.is_empty() {
        anyhow::bail!(
            "{} has no subdirectory: --cluster-objects runs one member cluster per subdirectory (examples/clusters/east, examples/clusters/west)",
            dir.display()
        );
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(clusters: Option<u16>, dir: Option<&Path>, labels: &[&str]) -> EmbeddedClustersArgs {
        EmbeddedClustersArgs {
            clusters,
            cluster_objects: dir.map(Path::to_path_buf),
            cluster_labels: labels.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn n_clusters_are_members_named_by_number_with_their_labels() {
        let members = args(Some(2), None, &["member-2:region=eu,tier=prod"])
            .members()
            .unwrap()
            .unwrap();
        assert_eq!(members[0].info, ClusterInfo::named("member-1"));
        assert_eq!(members[1].info.label("region"), Some("eu"));
        assert_eq!(members[1].info.label("tier"), Some("prod"));
        assert_eq!(
            members[1].info.label("reconciler-host.io/cluster"),
            Some("member-2")
        );
    }

    #[test]
    fn a_directory_gives_a_member_per_subdirectory_and_refuses_bad_names() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["west", "east", ".hidden"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("notes.yaml"), "").unwrap();
        let members = args(None, Some(dir.path()), &[])
            .members()
            .unwrap()
            .unwrap();
        let names: Vec<&str> = members.iter().map(|m| m.info.name.as_str()).collect();
        assert_eq!(names, ["east", "west"]);
        assert_eq!(members[0].objects_dir, Some(dir.path().join("east")));

        std::fs::create_dir(dir.path().join("Not_ok-")).unwrap();
        let err = args(None, Some(dir.path()), &[]).members().unwrap_err();
        assert!(err.to_string().contains("not a cluster name"), "{err}");
    }

    #[test]
    fn labels_for_an_unknown_cluster_or_without_members_are_refused() {
        let err = args(Some(2), None, &["east:a=b"]).members().unwrap_err();
        assert!(
            err.to_string()
                .contains("east, which is not among the clusters run (member-1, member-2)"),
            "{err}"
        );
        let err = args(None, None, &["east:a=b"]).members().unwrap_err();
        assert!(err.to_string().contains("add --clusters N"), "{err}");
        let err = args(Some(1), None, &["member-1:novalue"])
            .members()
            .unwrap_err();
        assert!(err.to_string().contains("is not KEY=VALUE"), "{err}");
        assert_eq!(args(None, None, &[]).members().unwrap(), None);
    }
}
