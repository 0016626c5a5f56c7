//! Which part of a cluster a host serves: the namespaces it watches and,
//! per plugin, a label selector its primaries must match.
//!
//! Namespaces are a watch matter (the backend is asked for those namespaces
//! only, so a host needs RBAC in them only, and caches nothing else). Label
//! selectors are an engine matter: a primary kind's watch may be shared with
//! another plugin that owns or reads that kind, so the filter applies to
//! what a plugin reconciles, not to what the cache holds.

use std::collections::{BTreeMap, BTreeSet};

use reconciler_contract::selector::LabelSelector;
use serde_json::Value;

/// What a host serves; the default serves everything.
#[derive(Clone, Debug, Default)]
pub struct ServeScope {
    /// Namespaces watched for namespaced kinds; empty means all.
    pub namespaces: BTreeSet<String>,
    pub selectors: PrimarySelectors,
}

/// Label selectors on primaries, each for one plugin or for all.
#[derive(Clone, Debug, Default)]
pub struct PrimarySelectors {
    all: Option<LabelSelector>,
    by_plugin: BTreeMap<String, LabelSelector>,
}

/// A `--selector` value that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SelectorSpecError {
    #[error(transparent)]
    Invalid(#[from] reconciler_contract::selector::SelectorError),
    #[error(
        "{0:?} is given more than once: give one selector per plugin (and at most one for all)"
    )]
    Repeated(String),
}

impl PrimarySelectors {
    /// Parses `[PLUGIN:]SELECTOR` specs: with a plugin name the selector
    /// applies to that plugin's primaries, without one to every plugin that
    /// has none of its own. Label selectors never contain `:`, so the split
    /// is unambiguous.
    pub fn parse<'a>(specs: impl IntoIterator<Item = &'a str>) -> Result<Self, SelectorSpecError> {
        let mut selectors = Self::default();
        for spec in specs {
            match spec.split_once(':') {
                Some((plugin, selector)) => {
                    let parsed = LabelSelector::parse(selector.trim())?;
                    if selectors
                        .by_plugin
                        .insert(plugin.trim().to_string(), parsed)
                        .is_some()
                    {
                        return Err(SelectorSpecError::Repeated(plugin.trim().to_string()));
                    }
                }
                None => {
                    if selectors.all.is_some() {
                        return Err(SelectorSpecError::Repeated("(all plugins)".into()));
                    }
                    selectors.all = Some(LabelSelector::parse(spec.trim())?);
                }
            }
        }
        Ok(selectors)
    }

    /// The selector `plugin`'s primaries must match, if any.
    pub fn for_plugin(&self, plugin: &str) -> Option<&LabelSelector> {
        self.by_plugin.get(plugin).or(self.all.as_ref())
    }

    /// Whether `plugin` reconciles `primary`.
    pub fn admits(&self, plugin: &str, primary: &Value) -> bool {
        self.for_plugin(plugin)
            .is_none_or(|selector| selector.matches_object(primary))
    }

    /// Plugin names given a selector of their own, to warn about names that
    /// match no plugin.
    pub fn named_plugins(&self) -> impl Iterator<Item = &str> {
        self.by_plugin.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels}})
    }

    #[test]
    fn plugin_selectors_override_the_one_for_all() {
        let selectors = PrimarySelectors::parse(["tier=prod", "podset: team in (a,b)"]).unwrap();
        let prod_a = labelled(json!({"tier": "prod", "team": "a"}));
        let dev_a = labelled(json!({"tier": "dev", "team": "a"}));
        let prod_c = labelled(json!({"tier": "prod", "team": "c"}));
        assert!(selectors.admits("podset", &dev_a));
        assert!(!selectors.admits("podset", &prod_c));
        assert!(selectors.admits("memcached", &prod_a));
        assert!(!selectors.admits("memcached", &dev_a));
    }

    #[test]
    fn no_selector_admits_everything() {
        let selectors = PrimarySelectors::parse([]).unwrap();
        assert!(selectors.admits("podset", &json!({"metadata": {"name": "x"}})));
    }

    #[test]
    fn bad_and_repeated_specs_are_refused() {
        let err = PrimarySelectors::parse(["podset:tier in prod"]).unwrap_err();
        assert!(err.to_string().contains("tier in prod"), "{err}");
        let err = PrimarySelectors::parse(["podset:a=b", "podset:c=d"]).unwrap_err();
        assert!(err.to_string().contains("podset"), "{err}");
        assert!(PrimarySelectors::parse(["a=b", "c=d"]).is_err());
    }
}
