"""The admission port, natively; scripts/test also runs the compiled plugin
against plugins/kubernetescluster's admission golden cases."""

import pytest

from app import DEFAULT_VERSION, Reconciler
from reconciler_sdk import AdmissionRequest, Operation, ReconcileError
from reconciler_sdk.testing import Harness


def cluster(masters=3, version="1.33", status=None, **spec):
    obj = {
        "apiVersion": "example.com/v1alpha1",
        "kind": "KubernetesCluster",
        "metadata": {"name": "prod", "namespace": "default"},
        "spec": {"masters": masters, "workers": 2, "version": version, "timeoutSeconds": 600, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_changing_masters_is_denied_naming_both_values():
    outcome = Harness(Reconciler).admit_update(cluster(3, status={"masters": 3}), cluster(5, status={"masters": 3}))
    assert not outcome.allowed
    assert "it is 3, the update asks for 5" in outcome.message


def test_setting_masters_back_to_what_the_cluster_started_with_is_allowed():
    outcome = Harness(Reconciler).admit_update(cluster(5, status={"masters": 3}), cluster(3, status={"masters": 3}))
    assert outcome.allowed


def test_an_empty_version_is_defaulted_and_the_default_is_validated():
    outcome = Harness(Reconciler).admit_create(cluster(version=""))
    assert outcome.allowed
    assert outcome.defaulted["spec"]["version"] == DEFAULT_VERSION


def test_a_set_version_is_left_alone():
    assert Harness(Reconciler).admit_create(cluster(version="1.30")).defaulted is None


def test_a_zero_timeout_is_denied():
    outcome = Harness(Reconciler).admit_create(cluster(timeoutSeconds=0))
    assert outcome.message == "spec.timeoutSeconds must be 1 or more, got 0"


def test_deletes_are_not_admission_calls_of_this_plugin():
    assert Harness(Reconciler).admit(AdmissionRequest(Operation.DELETE, None, cluster(timeoutSeconds=0))).allowed


def test_masters_that_are_not_a_number_fail_the_call():
    with pytest.raises(ReconcileError, match="spec.masters must be an integer"):
        Harness(Reconciler).admit_update(cluster(3), cluster("three"))


def test_the_first_reconcile_records_masters_and_later_ones_keep_it():
    harness = Harness(Reconciler)
    assert harness.reconcile(cluster(3)).status == {"masters": 3}
    assert harness.reconcile(cluster(5, status={"masters": 3})).status is None
