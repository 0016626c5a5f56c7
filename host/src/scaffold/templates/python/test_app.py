"""The plugin's logic, natively: the harness runs it as the host would."""

from app import Reconciler
from reconciler_sdk.testing import Harness


def example(**spec):
    return {
        "apiVersion": "{{api_version}}",
        "kind": "{{kind}}",
{{#namespaced}}
        "metadata": {"name": "example", "namespace": "default", "generation": 2},
{{/namespaced}}
{{^namespaced}}
        "metadata": {"name": "example", "generation": 2},
{{/namespaced}}
{{#custom}}
        "spec": spec,
{{/custom}}
    }


def test_a_{{kind_snake}}_is_reconciled():
{{#custom}}
    assert Harness(Reconciler).reconcile(example(size=1)).status == {"observedGeneration": 2}
{{/custom}}
{{^custom}}
    outcome = Harness(Reconciler).reconcile(example())
    assert outcome.applied == [] and outcome.status is None
{{/custom}}
{{#admission}}
{{#custom}}


def test_a_negative_size_is_denied_and_a_missing_one_defaults_to_1():
    harness = Harness(Reconciler)
    assert not harness.admit_create(example(size=-1)).allowed
    assert harness.admit_create(example()).defaulted["spec"]["size"] == 1
{{/custom}}
{{^custom}}


def test_the_admission_stubs_admit_unchanged():
    outcome = Harness(Reconciler).admit_create(example())
    assert outcome.allowed and outcome.defaulted is None
{{/custom}}
{{/admission}}
