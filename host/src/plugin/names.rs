//! Kubernetes naming rules, as the API server applies them. Checking them at
//! load and before apply turns a late, vague API error into an early one that
//! names the field.

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
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let valid = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && name.starts_with(alnum)
        && name.ends_with(alnum);
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{value:?} must be [prefix/]name with a name of 1 to 63 letters, digits, '-', '_' or '.'"
        ))
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
}
