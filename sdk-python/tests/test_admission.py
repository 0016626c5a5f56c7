"""Admission in the harness is admission as the host runs it: the settings
a plugin declares, defaults before validation, and the errors that make a
call fail rather than deny."""

import pytest

from reconciler_sdk import (
    AdmissionRequest,
    AdmissionSettings,
    FailurePolicy,
    KindRef,
    Operation,
    PluginMetadata,
    ReconcileError,
    Response,
    Verdict,
    plugin,
)
from reconciler_sdk.testing import Harness

COUNTER = KindRef("example.com", "v1", "Counter")
METADATA = PluginMetadata("counter", "0.1.0", COUNTER)


def counter(**spec):
    return {"apiVersion": "example.com/v1", "kind": "Counter", "metadata": {"name": "c", "namespace": "a"}, "spec": spec}


def nothing(primary, ctx):
    return Response()


def non_negative(request: AdmissionRequest) -> Verdict:
    if request.object["spec"].get("size", 0) < 0:
        return Verdict.deny("spec.size cannot be negative").warn("sizes start at 0")
    return Verdict.allow()


def size_one(obj, request):
    obj["spec"].setdefault("size", 1)


def test_a_plugin_without_admission_declares_none_and_admits_everything():
    reconciler = plugin(METADATA, nothing)
    assert reconciler.ADMISSION is None
    assert Harness(reconciler).admit_create(counter(size=-1)).allowed


def test_settings_are_derived_from_the_functions_given():
    assert plugin(METADATA, nothing, validate=non_negative).ADMISSION.settings == AdmissionSettings()
    served = plugin(METADATA, nothing, apply_defaults=size_one).ADMISSION
    assert served.settings.mutating and served.settings.failure_policy is FailurePolicy.FAIL


@pytest.mark.parametrize(
    "kwargs, complaint",
    [
        ({"admission": AdmissionSettings()}, "nothing to call"),
        ({"validate": non_negative, "admission": AdmissionSettings(mutating=True)}, "no apply_defaults"),
        ({"apply_defaults": size_one, "admission": AdmissionSettings()}, "never be called"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused_at_once(kwargs, complaint):
    with pytest.raises(ValueError, match=complaint):
        plugin(METADATA, nothing, **kwargs)


def test_a_denial_carries_its_message_and_warnings():
    outcome = Harness(plugin(METADATA, nothing, validate=non_negative)).admit_create(counter(size=-1))
    assert (outcome.allowed, outcome.message, outcome.warnings) == (False, "spec.size cannot be negative", ["sizes start at 0"])


def test_defaults_come_first_and_validation_sees_the_defaulted_object():
    seen = []

    def record(request):
        seen.append(request.object["spec"])
        return Verdict.allow()

    harness = Harness(plugin(METADATA, nothing, validate=record, apply_defaults=size_one))
    outcome = harness.admit_create(counter())
    assert outcome.defaulted["spec"] == {"size": 1} and seen == [{"size": 1}]
    assert harness.admit_create(counter(size=4)).defaulted is None


def test_defaults_may_return_a_new_object():
    def replaced(obj, request):
        return {**obj, "spec": {"size": 2}}

    assert Harness(plugin(METADATA, nothing, apply_defaults=replaced)).admit_create(counter()).defaulted["spec"] == {"size": 2}


def test_only_the_declared_operations_reach_the_plugin():
    deny_all = lambda request: Verdict.deny("no")  # noqa: E731
    harness = Harness(plugin(METADATA, nothing, validate=deny_all, admission=AdmissionSettings([Operation.DELETE])))
    assert harness.admit_create(counter()).allowed
    assert not harness.admit_delete(counter()).allowed
    assert not Harness(plugin(METADATA, nothing, validate=deny_all)).admit_update(counter(), counter()).allowed


def test_an_answer_that_is_not_a_verdict_fails_the_call():
    harness = Harness(plugin(METADATA, nothing, validate=lambda request: True))
    with pytest.raises(ReconcileError, match="not a Verdict"):
        harness.admit_create(counter())


def test_defaults_that_are_not_an_object_fail_the_call():
    harness = Harness(plugin(METADATA, nothing, apply_defaults=lambda obj, request: "size=1"))
    with pytest.raises(ReconcileError, match="not the object"):
        harness.admit_create(counter())
