//! One version's `openAPIV3Schema`, read once when its CRD is stored, with
//! its patterns and CEL rules compiled then, as the API server compiles
//! them when the CRD is created (a CRD whose pattern or rule does not
//! compile is refused, not stored to fail every later write).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::compiled_rule::{CompiledRule, RuleSpec};

/// A node of a structural schema: the keywords the API server acts on.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schema {
    #[serde(rename = "type")]
    pub type_name: Option<String>,
    pub format: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, Schema>,
    pub items: Option<Box<Schema>>,
    pub additional_properties: Option<AdditionalProperties>,
    #[serde(default)]
    pub required: Vec<String>,
    #[serde(rename = "enum")]
    pub allowed: Option<Vec<Value>>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    #[serde(default)]
    pub exclusive_minimum: bool,
    #[serde(default)]
    pub exclusive_maximum: bool,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub pattern: Option<String>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    #[serde(default)]
    pub unique_items: bool,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    #[serde(default)]
    pub nullable: bool,
    pub default: Option<Value>,
    #[serde(default)]
    pub all_of: Vec<Schema>,
    #[serde(default)]
    pub any_of: Vec<Schema>,
    #[serde(default)]
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    #[serde(rename = "x-kubernetes-preserve-unknown-fields", default)]
    pub preserve_unknown_fields: bool,
    #[serde(rename = "x-kubernetes-int-or-string", default)]
    pub int_or_string: bool,
    #[serde(rename = "x-kubernetes-embedded-resource", default)]
    pub embedded_resource: bool,
    #[serde(rename = "x-kubernetes-list-type")]
    pub list_type: Option<String>,
    #[serde(rename = "x-kubernetes-validations", default)]
    pub validations: Vec<RuleSpec>,
    /// `pattern`, compiled.
    #[serde(skip)]
    pub compiled_pattern: Option<regex::Regex>,
    /// `x-kubernetes-validations`, compiled.
    #[serde(skip)]
    pub rules: Vec<Arc<CompiledRule>>,
}

/// `additionalProperties`: `false`/`true`, or the schema of every value.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum AdditionalProperties {
    Allowed(bool),
    Schema(Box<Schema>),
}

impl Schema {
    /// Reads `schema` (an `openAPIV3Schema`) and compiles what it holds.
    /// `at` names it in errors (`spec.versions[0].schema.openAPIV3Schema`).
    pub fn read(schema: &Value, at: &str) -> Result<Self, String> {
        let mut parsed: Schema = serde_json::from_value(schema.clone())
            .map_err(|e| format!("{at}: Invalid value: {e}"))?;
        parsed.compile(at)?;
        Ok(parsed)
    }

    fn compile(&mut self, at: &str) -> Result<(), String> {
        if let Some(pattern) = &self.pattern {
            let regex = regex::Regex::new(pattern).map_err(|e| {
                format!(
                    "{at}.pattern: Invalid value: {pattern:?}: not a valid regular expression: {e}"
                )
            })?;
            self.compiled_pattern = Some(regex);
        }
        for (i, spec) in self.validations.iter().enumerate() {
            let rule = CompiledRule::compile(spec.clone()).map_err(|e| {
                format!("{at}.x-kubernetes-validations[{i}].rule: Invalid value: {:?}: compilation failed: {e}", spec.rule)
            })?;
            self.rules.push(Arc::new(rule));
        }
        for (name, child) in &mut self.properties {
            child.compile(&format!("{at}.properties[{name}]"))?;
        }
        if let Some(items) = &mut self.items {
            items.compile(&format!("{at}.items"))?;
        }
        if let Some(AdditionalProperties::Schema(values)) = &mut self.additional_properties {
            values.compile(&format!("{at}.additionalProperties"))?;
        }
        for (keyword, list) in [
            ("allOf", &mut self.all_of),
            ("anyOf", &mut self.any_of),
            ("oneOf", &mut self.one_of),
        ] {
            for (i, branch) in list.iter_mut().enumerate() {
                branch.compile(&format!("{at}.{keyword}[{i}]"))?;
            }
        }
        if let Some(not) = &mut self.not {
            not.compile(&format!("{at}.not"))?;
        }
        Ok(())
    }

    /// The schema of the value under `field` of an object this schema
    /// describes; `None` when the field is not declared.
    pub fn field(&self, field: &str) -> Option<&Schema> {
        if let Some(child) = self.properties.get(field) {
            return Some(child);
        }
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(values)) => Some(values),
            _ => None,
        }
    }

    /// Whether fields this schema does not declare are kept: preserved, or
    /// allowed by `additionalProperties: true`.
    pub fn keeps_unknown_fields(&self) -> bool {
        self.preserve_unknown_fields
            || matches!(
                self.additional_properties,
                Some(AdditionalProperties::Allowed(true)) | Some(AdditionalProperties::Schema(_))
            )
    }

    /// Whether values at this node are objects with their own metadata
    /// (`x-kubernetes-embedded-resource`), whose apiVersion, kind and
    /// metadata are implicitly declared.
    pub fn declares_implicitly(&self, field: &str) -> bool {
        self.embedded_resource && matches!(field, "apiVersion" | "kind" | "metadata")
    }
}
