//! Which plugins this host can talk to.
//!
//! A plugin names the contract it was built for in its export
//! (`reconciler:plugin/reconciler@0.2.2`). Versions follow semver: before 1.0
//! the minor version is the breaking one, after it the major.

use reconciler_contract::{CONTRACT_PACKAGE, CONTRACT_VERSION};

/// The export a plugin must provide, at this host's contract version.
pub fn expected_export() -> String {
    format!("{CONTRACT_PACKAGE}/reconciler@{CONTRACT_VERSION}")
}

/// Why a component is not a plugin this host can run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    #[error(
        "not a reconciler plugin: it exports no `{CONTRACT_PACKAGE}/reconciler` interface (it exports: {exports}); build it against the `plugin` world of wit/ (reconciler-sdk, sdk-python or sdk-js)"
    )]
    NotAPlugin { exports: String },
    #[error(
        "built for contract {CONTRACT_PACKAGE}@{plugin}, but this host speaks {CONTRACT_PACKAGE}@{host}: rebuild the plugin against a matching wit/ (reconciler-sdk, sdk-python or sdk-js), or run a host that speaks @{plugin}"
    )]
    Incompatible { plugin: String, host: String },
}

/// Checks the component's export names against this host's contract.
pub fn check_exports<'a>(
    export_names: impl IntoIterator<Item = &'a str>,
) -> Result<(), ContractError> {
    let names: Vec<&str> = export_names.into_iter().collect();
    let prefix = format!("{CONTRACT_PACKAGE}/reconciler@");
    let Some(version) = names.iter().find_map(|n| n.strip_prefix(&prefix)) else {
        let exports = if names.is_empty() {
            "nothing".to_string()
        } else {
            names.join(", ")
        };
        return Err(ContractError::NotAPlugin { exports });
    };
    if compatible(version, CONTRACT_VERSION) {
        Ok(())
    } else {
        Err(ContractError::Incompatible {
            plugin: version.to_string(),
            host: CONTRACT_VERSION.to_string(),
        })
    }
}

fn compatible(plugin: &str, host: &str) -> bool {
    fn parts(v: &str) -> Option<(u64, u64)> {
        let core = v.split(['-', '+']).next()?;
        let mut it = core.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        it.next()?.parse::<u64>().ok()?;
        Some((major, minor))
    }
    match (parts(plugin), parts(host)) {
        (Some((0, p_minor)), Some((0, h_minor))) => p_minor == h_minor,
        (Some((p_major, _)), Some((h_major, _))) => p_major == h_major,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compatibility_follows_semver() {
        for (plugin, host, ok) in [
            ("0.1.0", "0.1.0", true),
            ("0.1.3", "0.1.0", true),
            ("0.2.0", "0.1.0", false),
            ("1.0.0", "0.1.0", false),
            ("1.4.0", "1.0.0", true),
            ("2.0.0", "1.9.0", false),
            ("garbage", "0.1.0", false),
        ] {
            assert_eq!(compatible(plugin, host), ok, "{plugin} vs {host}");
        }
    }

    #[test]
    fn an_incompatible_plugin_is_told_both_versions() {
        let err = check_exports(["reconciler:plugin/reconciler@0.9.0"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("reconciler:plugin@0.9.0")
                && err.contains(&format!("@{CONTRACT_VERSION}")),
            "{err}"
        );
    }

    #[test]
    fn a_component_without_the_export_is_not_a_plugin() {
        let err = check_exports(["wasi:cli/run@0.2.0"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not a reconciler plugin") && err.contains("wasi:cli/run@0.2.0"),
            "{err}"
        );
    }
}
