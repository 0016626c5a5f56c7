//! The plugin's logic, natively: the harness runs it as the host would.

{{#custom}}
use {{crate}}::{ {{kind}}, {{kind}}Status, {{kind}}s };
{{/custom}}
{{^custom}}
use {{crate}}::{ {{kind}}, {{kind}}s };
{{/custom}}
use reconciler_sdk::testing::Harness;

fn example() -> {{kind}} {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "{{api_version}}",
        "kind": "{{kind}}",
{{#namespaced}}
        "metadata": {"name": "example", "namespace": "default", "generation": 2},
{{/namespaced}}
{{^namespaced}}
        "metadata": {"name": "example", "generation": 2},
{{/namespaced}}
{{#custom}}
        "spec": {"size": 1},
{{/custom}}
    }))
    .unwrap()
}

#[test]
fn a_{{kind_snake}}_is_reconciled() {
    let outcome = Harness::<{{kind}}s>::new().reconcile(&example()).unwrap();
{{#custom}}
    let status: {{kind}}Status = outcome.status().unwrap().expect("a status");
    assert_eq!(status.observed_generation, 2);
{{/custom}}
{{^custom}}
    assert!(outcome.response.apply.is_empty() && outcome.response.status.is_none());
{{/custom}}
}
{{#admission}}
{{#custom}}

#[test]
fn a_negative_size_is_denied_and_a_missing_one_defaults_to_1() {
    let harness = Harness::<{{kind}}s>::new();
    let mut negative = example();
    negative.spec.size = Some(-1);
    assert!(!harness.admit_create(&negative).unwrap().allowed());
    let mut missing = example();
    missing.spec.size = None;
    let defaulted = harness.admit_create(&missing).unwrap().defaulted.expect("defaulted");
    assert_eq!(defaulted["spec"]["size"], 1);
}
{{/custom}}
{{^custom}}

#[test]
fn the_admission_stubs_admit_unchanged() {
    let outcome = Harness::<{{kind}}s>::new().admit_create(&example()).unwrap();
    assert!(outcome.allowed() && outcome.defaulted.is_none());
}
{{/custom}}
{{/admission}}
