"""The conformance suite (tests/conformance/cases) run by the Python SDK's
native harness: each case's probe reconciled by ``Harness``, its answer
compared with what the case expects, as ``reconciler-host test`` compares
the compiled probe's. A rule the host keeps and the harness does not fails
here, naming the case."""

import datetime
import json
import pathlib

import pytest
import yaml

from app import Reconciler
from reconciler_sdk import ReconcileError
from reconciler_sdk.testing import Harness

class CaseLoader(yaml.SafeLoader):
    """YAML as the host reads cases: times stay strings."""


CaseLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

CASES = sorted((pathlib.Path(__file__).parent.parent / "cases").glob("*.yaml"))


def order(obj):
    meta = obj.get("metadata") or {}
    return (obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace") or "", meta.get("name") or "")


def answer(outcome) -> dict:
    """The answer in the expectation's shape: absent keys mean nothing."""
    out = {}
    if outcome.applied:
        out["apply"] = sorted(outcome.applied, key=order)
    if outcome.deleted:
        out["delete"] = sorted(
            ({"apiVersion": d.api_version, "kind": d.kind, "namespace": d.namespace, "name": d.name}
             for d in outcome.deleted),
            key=lambda d: (d["apiVersion"], d["kind"], d["namespace"] or "", d["name"]),
        )
    if outcome.status is not None:
        out["status"] = outcome.status
    if outcome.events:
        out["events"] = [{"type": e.type.value, "reason": e.reason, "message": e.message} for e in outcome.events]
    return out


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_the_python_harness_answers_as_the_host(path):
    case = yaml.load(path.read_text(), Loader=CaseLoader)
    now = case.get("now")
    harness = Harness(Reconciler, now=None if now is None else datetime.datetime.fromisoformat(now.replace("Z", "+00:00")))
    harness.with_objects(*case.get("objects") or [])
    if "cluster" in case:
        harness.in_cluster(case["cluster"]["name"], case["cluster"].get("labels") or {})
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(ReconcileError) as raised:
            outcome = harness.reconcile(case["primary"])
            pytest.fail(f"expected an error containing {expect['error']!r}, but the probe answered {answer(outcome)}")
        assert expect["error"] in str(raised.value)
        return
    expected = dict(expect)
    if "apply" in expected:
        expected["apply"] = sorted(expected["apply"], key=order)
    assert json.loads(json.dumps(answer(harness.reconcile(case["primary"])))) == expected
