//! What a plugin and its kind are called, checked as the user gives them,
//! and the names derived from them (plural, snake case): one spelling for
//! the directory, crate, module, CRD and templates alike.

use std::fmt;

use reconciler_contract::KindRef;

use super::error::ScaffoldError;

/// The plugin's name: a DNS-1123 label starting with a letter, so it is
/// also a crate, file and package name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginName(String);

impl PluginName {
    pub fn parse(name: &str) -> Result<Self, ScaffoldError> {
        let ok = (1..=63).contains(&name.len())
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if ok {
            Ok(Self(name.to_string()))
        } else {
            Err(ScaffoldError::Name(name.to_string()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PluginName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `GROUP/VERSION/KIND`, or `VERSION/KIND` for the core group.
pub fn parse_kind(given: &str) -> Result<KindRef, ScaffoldError> {
    let bad = |why| ScaffoldError::Kind {
        given: given.to_string(),
        why,
    };
    let parts: Vec<&str> = given.split('/').collect();
    let (group, version, kind) = match parts.as_slice() {
        [version, kind] => ("", *version, *kind),
        [group, version, kind] => (*group, *version, *kind),
        _ => return Err(bad("it needs two or three parts separated by '/'")),
    };
    let dns = |s: &str| {
        !s.is_empty()
            && s.split('.').all(|label| {
                !label.is_empty()
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    };
    if parts.len() == 3 && !dns(group) {
        return Err(bad("the group is a lowercase DNS name"));
    }
    let version_ok = version.starts_with('v')
        && version[1..].starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !version_ok {
        return Err(bad("the version looks like v1, v1beta1 or v1alpha1"));
    }
    let kind_ok = kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !kind_ok {
        return Err(bad("the kind is CamelCase letters and digits"));
    }
    Ok(KindRef::new(group, version, kind))
}

/// Whether a group is one the Kubernetes project serves (its kinds need no
/// CRD): the core group, the unsuffixed built-in groups and `*.k8s.io`.
pub fn is_builtin_group(group: &str) -> bool {
    const UNSUFFIXED: &[&str] = &["", "apps", "batch", "autoscaling", "policy"];
    UNSUFFIXED.contains(&group) || group == "k8s.io" || group.ends_with(".k8s.io")
}

/// The resource name a CRD gives a kind: its plural in lowercase.
pub fn plural_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    let consonant_y =
        lower.ends_with('y') && !lower[..lower.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
    if consonant_y {
        format!("{}ies", &lower[..lower.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

pub(super) fn snake_of(kind: &str) -> String {
    let mut out = String::new();
    for (i, c) in kind.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds_are_checked_with_what_would_be_right() {
        for bad in [
            "",
            "Widget",
            "1widget",
            "widget_op",
            "widget-",
            &"a".repeat(64),
        ] {
            assert!(PluginName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(PluginName::parse("widget-operator2").is_ok());
        let kind = parse_kind("example.com/v1alpha1/Widget").unwrap();
        assert_eq!(
            (
                kind.group.as_str(),
                kind.version.as_str(),
                kind.kind.as_str()
            ),
            ("example.com", "v1alpha1", "Widget")
        );
        assert_eq!(parse_kind("v1/ConfigMap").unwrap().group, "");
        for bad in [
            "Widget",
            "example.com/Widget/v1",
            "Example.com/v1/Widget",
            "example.com/1/Widget",
            "example.com/v1/widget",
            "a/b/c/d",
        ] {
            let err = parse_kind(bad).unwrap_err().to_string();
            assert!(err.contains("e.g. example.com/v1alpha1/Widget"), "{err}");
        }
    }

    #[test]
    fn plurals_follow_the_usual_english_rules() {
        for (kind, plural) in [
            ("Widget", "widgets"),
            ("Policy", "policies"),
            ("Gateway", "gateways"),
            ("Ingress", "ingresses"),
            ("Box", "boxes"),
            ("Mesh", "meshes"),
        ] {
            assert_eq!(plural_of(kind), plural);
        }
    }
}
