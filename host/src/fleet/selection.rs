//! Which plugins run on which member clusters: `--plugin-clusters
//! PLUGIN:SELECTOR`, a label selector over a member's labels (its source's
//! labels, plus the name and file labels every member carries). A plugin
//! not named runs on every member.

use std::collections::BTreeMap;

use reconciler_contract::selector::LabelSelector;

/// Every member carries its name under this label, so a selector can name
/// clusters one by one (`reconciler-host.io/cluster in (east,west)`).
pub const CLUSTER_LABEL: &str = reconciler_contract::CLUSTER_NAME_LABEL;

/// A member from a `--clusters-dir` file carries the file's name here.
pub const FILE_LABEL: &str = "reconciler-host.io/cluster-file";

/// The parsed `--plugin-clusters` options.
#[derive(Clone, Debug, Default)]
pub struct PluginClusters {
    by_plugin: BTreeMap<String, LabelSelector>,
}

impl PluginClusters {
    /// Parses `PLUGIN:SELECTOR` options; a plugin named twice, an empty
    /// name or a selector that does not parse is an error naming it.
    pub fn parse(options: &[String]) -> Result<Self, String> {
        let mut by_plugin = BTreeMap::new();
        for option in options {
            let Some((plugin, selector)) = option.split_once(':') else {
                return Err(format!(
                    "--plugin-clusters {option:?}: expected PLUGIN:SELECTOR, e.g. podset:env=prod"
                ));
            };
            let plugin = plugin.trim();
            if plugin.is_empty() {
                return Err(format!(
                    "--plugin-clusters {option:?}: the plugin name is empty"
                ));
            }
            let parsed = LabelSelector::parse(selector.trim())
                .map_err(|e| format!("--plugin-clusters {option:?}: {e}"))?;
            if by_plugin.insert(plugin.to_string(), parsed).is_some() {
                return Err(format!(
                    "--plugin-clusters names plugin {plugin} twice: give one selector per plugin"
                ));
            }
        }
        Ok(Self { by_plugin })
    }

    /// Whether `plugin` runs on a member with these labels.
    pub fn runs(&self, plugin: &str, labels: &BTreeMap<String, String>) -> bool {
        self.by_plugin
            .get(plugin)
            .is_none_or(|selector| selector.matches(labels))
    }

    /// The plugins these options name, to warn about names never loaded.
    pub fn named(&self) -> impl Iterator<Item = &str> {
        self.by_plugin.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_plugin_runs_where_its_selector_matches_and_unnamed_ones_everywhere() {
        let clusters = PluginClusters::parse(&["podset:env=prod".into()]).unwrap();
        assert!(clusters.runs("podset", &labels(&[("env", "prod")])));
        assert!(!clusters.runs("podset", &labels(&[("env", "dev")])));
        assert!(clusters.runs("memcached", &labels(&[])));
    }

    #[test]
    fn malformed_options_are_refused_naming_them() {
        let err = PluginClusters::parse(&["podset".into()]).unwrap_err();
        assert!(err.contains("expected PLUGIN:SELECTOR"), "{err}");
        let err = PluginClusters::parse(&["podset:env in (".into()]).unwrap_err();
        assert!(err.contains("podset:env in ("), "{err}");
        let err = PluginClusters::parse(&["a:x=1".into(), "a:y=2".into()]).unwrap_err();
        assert!(err.contains("twice"), "{err}");
    }
}
