//! Kubernetes label selectors in their string form.
//!
//! The host's cache `list` import and the SDK's test harness both filter with
//! this one implementation, so a selector behaves the same in a native test, in
//! `reconciler-host test` and on a cluster. The syntax is the API server's:
//! `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a` (exists) and `!a`
//! (does not exist), joined by commas; the empty string selects everything.

use crate::object_meta::MetadataField;
use crate::quoted::shorten;
use std::collections::BTreeMap;
use std::fmt;

/// One parsed requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            // As on the API server: a missing key satisfies `!=` and `notin`.
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// The longest selector accepted, in bytes. A selector is parsed into
/// requirements several times its size, and every object a list examines
/// is matched against all of them, so its size bounds both what one list
/// allocates and the work per object. 16 KiB holds a `notin` of two
/// hundred 63-character values, far past what a controller writes; the
/// API server's own bound is only its URL length.
pub const MAX_SELECTOR_BYTES: usize = 16 * 1024;

/// How much of a selector an error quotes.
const QUOTED_BYTES: usize = 128;

/// A parsed label selector. All requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// A selector string that does not parse; says where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    pub selector: String,
    pub reason: String,
}

impl LabelSelector {
    /// Selects every object.
    pub fn everything() -> Self {
        Self::default()
    }

    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let fail = |reason: String| SelectorError {
            selector: shorten(selector, QUOTED_BYTES),
            reason,
        };
        if selector.len() > MAX_SELECTOR_BYTES {
            return Err(fail(format!(
                "it is {} bytes long, more than the {MAX_SELECTOR_BYTES} a label selector may be: select by fewer values, or list more widely and filter",
                selector.len()
            )));
        }
        let mut requirements = Vec::new();
        for term in split_terms(selector).map_err(fail)? {
            requirements.push(parse_term(term).map_err(fail)?);
        }
        Ok(Self { requirements })
    }

    /// The `key=value` requirements: every object selected carries each of
    /// these labels, which lets a cache look objects up by label.
    pub fn equalities(&self) -> impl Iterator<Item = (&str, &str)> {
        self.requirements.iter().filter_map(|r| match r {
            Requirement::Equals(k, v) => Some((k.as_str(), v.as_str())),
            Requirement::In(k, vs) if vs.len() == 1 => Some((k.as_str(), vs[0].as_str())),
            _ => None,
        })
    }

    /// The work of matching one object, in comparisons at most: a list
    /// bounds its work by this times the objects it examines.
    pub fn cost(&self) -> usize {
        self.requirements
            .iter()
            .map(|r| match r {
                Requirement::In(_, vs) | Requirement::NotIn(_, vs) => 1 + vs.len(),
                _ => 1,
            })
            .sum::<usize>()
            .max(1)
    }

    /// Whether labels (a `metadata.labels` map) satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether a JSON object's `metadata.labels` satisfy the selector.
    pub fn matches_object(&self, object: &serde_json::Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        let labels: BTreeMap<String, String> = object
            .metadata_field("labels")
            .and_then(|l| l.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches(&labels)
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::DoesNotExist(k) => format!("!{k}"),
            })
            .collect();
        f.write_str(&terms.join(","))
    }
}

/// Splits on commas that are not inside a parenthesised value set.
fn split_terms(selector: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    terms.push(&selector[start..]);
    if terms.len() == 1 && terms[0].trim().is_empty() {
        return Ok(Vec::new());
    }
    Ok(terms)
}

fn parse_term(term: &str) -> Result<Requirement, String> {
    let term = term.trim();
    if term.is_empty() {
        return Err("empty requirement (stray comma?)".into());
    }
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key_of(key)?));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(Requirement::NotEquals(key_of(key)?, value_of(value)?));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Requirement::Equals(key_of(key)?, value_of(value)?));
    }
    let mut words = term.splitn(2, char::is_whitespace);
    let key = key_of(words.next().unwrap_or_default())?;
    let Some(rest) = words.next() else {
        return Ok(Requirement::Exists(key));
    };
    let rest = rest.trim_start();
    let (op, set) = if let Some(set) = rest.strip_prefix("notin") {
        ("notin", set)
    } else if let Some(set) = rest.strip_prefix("in") {
        ("in", set)
    } else {
        return Err(format!("expected '=', '!=', 'in' or 'notin' after {key:?}"));
    };
    let set = set.trim();
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| {
            format!("'{op}' needs a parenthesised set of values, e.g. {key} {op} (a,b)")
        })?;
    let values = inner
        .split(',')
        .map(value_of)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(if op == "in" {
        Requirement::In(key, values)
    } else {
        Requirement::NotIn(key, values)
    })
}

fn key_of(key: &str) -> Result<String, String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key.len() <= 316
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_string())
    } else {
        Err(format!("{key:?} is not a valid label key"))
    }
}

fn value_of(value: &str) -> Result<String, String> {
    let value = value.trim();
    let valid = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(value.to_string())
    } else {
        Err(format!("{value:?} is not a valid label value"))
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
    fn each_operator_selects_as_the_api_server_does() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (db,web)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("missing notin (db)", true),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web,tier=front", true),
            ("app=web, tier=back", false),
            ("app in (web, db),!legacy", true),
        ];
        for (selector, expected) in cases {
            let parsed = LabelSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(&l), expected, "selector {selector:?}");
        }
    }

    #[test]
    fn malformed_selectors_say_what_is_wrong() {
        for (selector, needle) in [
            ("app in db", "parenthesised"),
            ("app in (a", "unbalanced"),
            ("a=b,,c=d", "stray comma"),
            ("app=we b", "not a valid label value"),
            ("app ~ x", "expected"),
        ] {
            let err = LabelSelector::parse(selector).unwrap_err();
            assert!(err.to_string().contains(needle), "{selector:?}: {err}");
        }
    }

    #[test]
    fn a_selector_past_the_size_limit_is_refused_before_it_is_parsed() {
        let values = vec!["v"; MAX_SELECTOR_BYTES / 2].join(",");
        let selector = format!("app notin ({values})");
        let err = LabelSelector::parse(&selector).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "more than the {MAX_SELECTOR_BYTES} a label selector may be"
            )),
            "{text}"
        );
        assert!(text.len() < 400, "quotes only the start: {text}");
        let within = format!("app notin ({})", vec!["v"; 1000].join(","));
        assert_eq!(LabelSelector::parse(&within).unwrap().cost(), 1001);
    }

    #[test]
    fn objects_without_labels_match_only_negative_requirements() {
        let pod = serde_json::json!({"metadata": {"name": "p"}});
        assert!(LabelSelector::parse("!app").unwrap().matches_object(&pod));
        assert!(
            !LabelSelector::parse("app=web")
                .unwrap()
                .matches_object(&pod)
        );
    }
}
