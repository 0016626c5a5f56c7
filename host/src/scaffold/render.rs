//! The scaffold's template language, small on purpose: `{{var}}` is
//! replaced by its value; a line holding only `{{#flag}}`, `{{^flag}}` or
//! `{{/flag}}` opens a section kept when the flag is set (or, with `^`,
//! unset) and closes it; the same markers inside one line keep or drop
//! the text between them. A template that names an unknown variable or
//! flag, or leaves a section open, is a bug in the host: an error says
//! which.

use std::collections::BTreeMap;

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("line {line}: no variable or flag named {name:?}")]
    Unknown { line: usize, name: String },
    #[error("line {line}: {found:?} closes no open section (open: {open:?})")]
    Unbalanced {
        line: usize,
        found: String,
        open: Option<String>,
    },
    #[error("the section {0:?} is never closed")]
    Unclosed(String),
}

/// The values a template is rendered with.
#[derive(Debug, Default)]
pub struct Values {
    vars: BTreeMap<&'static str, String>,
    flags: BTreeMap<&'static str, bool>,
}

impl Values {
    pub fn var(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.vars.insert(name, value.into());
        self
    }

    pub fn flag(mut self, name: &'static str, on: bool) -> Self {
        self.flags.insert(name, on);
        self
    }

    fn flag_of(&self, name: &str, line: usize) -> Result<bool, RenderError> {
        self.flags
            .get(name)
            .copied()
            .ok_or_else(|| RenderError::Unknown {
                line,
                name: name.to_string(),
            })
    }
}

/// A section marker: `{{#x}}`, `{{^x}}` or `{{/x}}`.
enum Marker<'a> {
    Open { name: &'a str, negated: bool },
    Close(&'a str),
}

fn marker(tag: &str) -> Option<Marker<'_>> {
    if let Some(name) = tag.strip_prefix('#') {
        Some(Marker::Open {
            name,
            negated: false,
        })
    } else if let Some(name) = tag.strip_prefix('^') {
        Some(Marker::Open {
            name,
            negated: true,
        })
    } else {
        tag.strip_prefix('/').map(Marker::Close)
    }
}

pub fn render(template: &str, values: &Values) -> Result<String, RenderError> {
    let mut out = String::with_capacity(template.len());
    // Open sections: name and whether their text is kept.
    let mut open: Vec<(String, bool)> = Vec::new();
    for (index, line) in template.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim();
        let whole = trimmed
            .strip_prefix("{{")
            .and_then(|t| t.strip_suffix("}}"))
            .filter(|t| !t.contains("{{"))
            .and_then(marker);
        if let Some(m) = whole {
            section(m, values, &mut open, number)?;
            continue;
        }
        if open.iter().all(|(_, kept)| *kept) {
            out.push_str(&render_line(line, values, number)?);
            out.push('\n');
        }
    }
    if let Some((name, _)) = open.pop() {
        return Err(RenderError::Unclosed(name));
    }
    Ok(out)
}

fn section(
    m: Marker<'_>,
    values: &Values,
    open: &mut Vec<(String, bool)>,
    line: usize,
) -> Result<(), RenderError> {
    match m {
        Marker::Open { name, negated } => {
            let on = values.flag_of(name, line)?;
            open.push((name.to_string(), on != negated));
        }
        Marker::Close(name) => match open.pop() {
            Some((top, _)) if top == name => {}
            other => {
                return Err(RenderError::Unbalanced {
                    line,
                    found: name.to_string(),
                    open: other.map(|(n, _)| n),
                });
            }
        },
    }
    Ok(())
}

/// One line's variables and inline sections.
fn render_line(line: &str, values: &Values, number: usize) -> Result<String, RenderError> {
    let mut out = String::with_capacity(line.len());
    let mut open: Vec<(String, bool)> = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("{{") {
        let kept = open.iter().all(|(_, k)| *k);
        if kept {
            out.push_str(&rest[..start]);
        }
        // `{{{var}}}` is a literal brace around a variable (JSDoc types).
        let (brace, after) = match rest[start + 2..].strip_prefix('{') {
            Some(after) if !after.starts_with('{') => ("{", after),
            _ => ("", &rest[start + 2..]),
        };
        if kept {
            out.push_str(brace);
        }
        let Some(end) = after.find("}}") else {
            // Not a tag: keep the text as it is.
            if kept {
                out.push_str(&rest[start + brace.len()..]);
            }
            return Ok(out);
        };
        let tag = &after[..end];
        match marker(tag) {
            Some(m) => section(m, values, &mut open, number)?,
            None => {
                let value = values.vars.get(tag).ok_or_else(|| RenderError::Unknown {
                    line: number,
                    name: tag.to_string(),
                })?;
                if kept {
                    out.push_str(value);
                }
            }
        }
        rest = &after[end + 2..];
    }
    if let Some((name, _)) = open.pop() {
        return Err(RenderError::Unclosed(name));
    }
    if open.iter().all(|(_, k)| *k) {
        out.push_str(rest);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values {
        Values::default()
            .var("kind", "Widget")
            .flag("custom", true)
            .flag("admission", false)
    }

    #[test]
    fn variables_are_replaced_and_sections_kept_or_dropped() {
        let template = "a {{kind}}\n{{#custom}}\ncustom {{kind}}\n{{/custom}}\n{{^custom}}\nbuiltin\n{{/custom}}\n{{#admission}}\nadmits\n{{/admission}}\nend\n";
        assert_eq!(
            render(template, &values()).unwrap(),
            "a Widget\ncustom Widget\nend\n"
        );
    }

    #[test]
    fn inline_sections_and_literal_braces() {
        let template =
            "x{{#custom}} --crds crds{{/custom}}{{^custom}} none{{/custom}} @param {{{kind}}} o\n";
        assert_eq!(
            render(template, &values()).unwrap(),
            "x --crds crds @param {Widget} o\n"
        );
    }

    #[test]
    fn nested_sections_keep_only_when_all_are_on() {
        let template = "{{#custom}}\n{{#admission}}\nboth\n{{/admission}}\n{{^admission}}\ncustom only\n{{/admission}}\n{{/custom}}\n";
        assert_eq!(render(template, &values()).unwrap(), "custom only\n");
    }

    #[test]
    fn mistakes_in_a_template_are_named() {
        assert_eq!(
            render("{{knd}}\n", &values()),
            Err(RenderError::Unknown {
                line: 1,
                name: "knd".into()
            })
        );
        assert_eq!(
            render("{{#custom}}\n", &values()),
            Err(RenderError::Unclosed("custom".into()))
        );
        assert!(matches!(
            render("{{#custom}}\n{{/admission}}\n", &values()),
            Err(RenderError::Unbalanced { line: 2, .. })
        ));
    }
}
