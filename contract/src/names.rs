//! Kubernetes naming rules, as the API server applies them. Checking them at
//! load and before apply turns a late, vague API error into an early one that
//! names the field.

use crate::KindRef;

/// DNS-1123 label: at most 63 lowercase alphanumerics or '-', starting and
/// ending alphanumeric. Namespaces, plugin names, many object names.
pub fn check_dns_label(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 63 {
        return Err(format!("{value:?} must be 1 to 63 characters"));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !value.chars().all(ok_char) || !value.starts_with(alnum) || !value.ends_with(alnum) {
        return Err(format!(
            "{value:?} must be lowercase letters, digits and '-', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// DNS-1035 label: a DNS-1123 label that starts with a letter. Service names
/// become DNS names and environment variables, hence the stricter rule.
pub fn check_dns1035_label(value: &str) -> Result<(), String> {
    check_dns_label(value)?;
    if !value.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(format!("{value:?} must start with a lowercase letter"));
    }
    Ok(())
}

/// DNS-1123 subdomain: dot-separated labels, at most 253 characters. API
/// groups and most object names.
pub fn check_dns_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 253 {
        return Err(format!("{value:?} must be 1 to 253 characters"));
    }
    for label in value.split('.') {
        check_dns_label(label).map_err(|_| {
            format!("{value:?} must be lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit")
        })?;
    }
    Ok(())
}

/// A name that is only a URL path segment (RBAC objects: `system:node`, say):
/// anything but empty, `.`, `..`, or a name holding '/' or '%'.
pub fn check_path_segment_name(value: &str) -> Result<(), String> {
    if value.is_empty() || value == "." || value == ".." {
        return Err(format!("{value:?} is not a usable name"));
    }
    if value.contains(['/', '%']) {
        return Err(format!("{value:?} may not contain '/' or '%'"));
    }
    Ok(())
}

/// A kind: UpperCamelCase ASCII letters and digits.
pub fn check_kind(value: &str) -> Result<(), String> {
    let valid = value.len() <= 63
        && value.starts_with(|c: char| c.is_ascii_uppercase())
        && value.chars().all(|c| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{value:?} must be UpperCamelCase letters and digits, like Deployment"
        ))
    }
}

/// Up to 63 letters, digits, '-', '_' or '.', starting and ending with a
/// letter or digit: the name part of a qualified name, and a label value.
fn is_short_token(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && value.starts_with(alnum)
        && value.ends_with(alnum)
}

/// A label or annotation key, or a finalizer: an optional DNS-subdomain
/// prefix and '/', then a name of at most 63 alphanumerics, '-', '_', '.'.
pub fn check_qualified_name(value: &str) -> Result<(), String> {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    if let Some(prefix) = prefix {
        check_dns_subdomain(prefix).map_err(|e| format!("prefix of {value:?}: {e}"))?;
    }
    if is_short_token(name) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} must be [prefix/]name with a name of 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
}

/// A label value: empty, or what a qualified name's name part may be.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_short_token(value) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} must be empty or 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ))
    }
}

/// What the API server requires of a name, by kind. Most kinds take a
/// DNS-1123 subdomain; the exceptions below were each checked against
/// kube-apiserver 1.28 (a kind not listed, custom resources included, gets
/// the subdomain rule, which is what the API server applies to them too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NameRule {
    Subdomain,
    /// Namespaces and StatefulSets: their names become single DNS labels
    /// (a namespace in service DNS names, a StatefulSet in pod hostnames).
    DnsLabel,
    /// Services: a DNS-1035 label (starts with a letter).
    Dns1035Label,
    /// A subdomain of at most this many characters: a CronJob's name gets an
    /// 11-character suffix for its Jobs (52), a Job's name becomes a label
    /// value on its pods (63).
    ShortSubdomain(usize),
    /// RBAC objects: only a URL path segment (`system:controller:x` is fine).
    PathSegment,
}

fn name_rule(kind: &KindRef) -> NameRule {
    match (kind.group.as_str(), kind.kind.as_str()) {
        ("", "Namespace") | ("apps", "StatefulSet") => NameRule::DnsLabel,
        ("", "Service") => NameRule::Dns1035Label,
        ("batch", "CronJob") => NameRule::ShortSubdomain(52),
        ("batch", "Job") => NameRule::ShortSubdomain(63),
        (
            "rbac.authorization.k8s.io",
            "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
        ) => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

/// Checks `name` against the rule the API server applies to `kind`'s names.
pub fn check_object_name(kind: &KindRef, name: &str) -> Result<(), String> {
    match name_rule(kind) {
        NameRule::Subdomain => check_dns_subdomain(name),
        NameRule::DnsLabel => check_dns_label(name)
            .map_err(|e| format!("{e} (a {} name is a DNS-1123 label: no dots)", kind.kind)),
        NameRule::Dns1035Label => check_dns1035_label(name)
            .map_err(|e| format!("{e} (a {} name is a DNS-1035 label)", kind.kind)),
        NameRule::ShortSubdomain(max) => {
            check_dns_subdomain(name)?;
            if name.len() > max {
                return Err(format!(
                    "{name:?} is {} characters; a {} name may have at most {max}",
                    name.len(),
                    kind.kind
                ));
            }
            Ok(())
        }
        NameRule::PathSegment => check_path_segment_name(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_api_server_rules() {
        assert!(check_dns_label("podset-2").is_ok());
        for bad in ["", "PodSet", "-a", "a-", "a_b", &"a".repeat(64)] {
            assert!(check_dns_label(bad).is_err(), "{bad:?}");
        }
        assert!(check_dns_subdomain("apps.example.com").is_ok());
        assert!(check_dns_subdomain("apps..example").is_err());
        assert!(check_kind("PodSet").is_ok());
        assert!(check_kind("podset").is_err());
        assert!(check_kind("Pod-Set").is_err());
        assert!(check_qualified_name("example.com/cleanup").is_ok());
        assert!(check_qualified_name("podset").is_ok());
        assert!(check_qualified_name("Example.com/x").is_err());
        assert!(check_qualified_name("example.com/").is_err());
    }

    #[test]
    fn qualified_names_match_the_api_server() {
        for good in [
            "a",
            "A_b.c-D",
            &"a".repeat(63),
            &format!("{}/x", "a.".repeat(126) + "a"),
        ] {
            assert!(check_qualified_name(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "bad key!",
            "-a",
            "a_",
            &"a".repeat(64),
            "a/b/c",
            "/a",
            &format!("{}/x", "a".repeat(254)),
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn label_values_may_be_empty_or_short_tokens() {
        for good in ["", "a", "A_b.c-D", "3", &"a".repeat(63)] {
            assert!(check_label_value(good).is_ok(), "{good:?}");
        }
        for bad in ["-x", "x.", "a b", "ü", &"a".repeat(64)] {
            assert!(check_label_value(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_kind_gets_the_name_rule_the_api_server_applies() {
        let k = |group: &str, kind: &str| KindRef::new(group, "v1", kind);
        // (kind, a name the API server accepts, one it refuses)
        let cases = [
            (k("", "ConfigMap"), "a.b", "Upper"),
            (k("apps", "Deployment"), "a.b", "a_b"),
            (k("example.com", "PodSet"), "a.b", "a..b"),
            (k("", "Namespace"), "1ns", "a.b"),
            (k("apps", "StatefulSet"), "1abc", "a.b"),
            (k("", "Service"), "web-1", "1abc"),
            (k("batch", "CronJob"), &"c".repeat(52), &"c".repeat(53)),
            (k("batch", "Job"), &"j".repeat(63), &"j".repeat(64)),
            (
                k("rbac.authorization.k8s.io", "ClusterRole"),
                "system:Foo_x",
                "a/b",
            ),
            (k("rbac.authorization.k8s.io", "RoleBinding"), "A:b", ".."),
        ];
        for (kind, good, bad) in cases {
            assert!(check_object_name(&kind, good).is_ok(), "{kind} {good:?}");
            let err = check_object_name(&kind, bad).expect_err(bad);
            assert!(err.contains(bad), "{kind}: {err}");
        }
    }
}
