"""The podset logic, natively through the SDK harness: no Wasm involved."""

import pytest

# reconciler_sdk comes from the environment scripts/build-plugins sets up
# (target/guest-tools/python, where sdk-python is installed), as it would
# from any environment a plugin author installs it into.
from app import DEPLOYMENT, Reconciler
from reconciler_sdk import ReconcileError
from reconciler_sdk.testing import Harness


def podset(name, size, **meta):
    return {"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", **meta}, "spec": {"size": size}}


def pod(name, owner, namespace="default"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "podset", "podset": owner}}}


def observed_deployment(owner, replicas):
    d = Harness(Reconciler).reconcile(podset(owner, replicas)).applied_of(DEPLOYMENT)[0]
    d["metadata"]["ownerReferences"] = [{"apiVersion": "example.com/v1alpha1", "kind": "PodSet", "name": owner,
                                         "uid": f"uid-{owner}", "controller": True}]
    return d


def test_size_becomes_an_owned_deployment_with_the_podset_labels():
    outcome = Harness(Reconciler).reconcile(podset("web", 3))
    [d] = outcome.applied_of(DEPLOYMENT)
    assert d["metadata"]["name"] == "web"
    assert d["spec"]["replicas"] == 3
    assert d["spec"]["template"]["metadata"]["labels"] == {"app": "podset", "podset": "web"}
    assert [(e.reason, e.message) for e in outcome.events] == [("Created", "Deployment web with 3 replicas")]


def test_status_lists_its_own_pods_sorted_from_its_namespace_only():
    h = Harness(Reconciler).with_objects(pod("web-b", "web"), pod("web-a", "web"), pod("api-a", "api"),
                                         pod("web-c", "web", namespace="staging"))
    assert h.reconcile(podset("web", 2)).status == {"podNames": ["web-a", "web-b"]}


def test_scaling_says_so_and_an_unchanged_size_is_quiet():
    h = Harness(Reconciler).with_objects(observed_deployment("web", 3))
    assert [e.reason for e in h.reconcile(podset("web", 5)).events] == ["Scaled"]
    assert h.reconcile(podset("web", 3)).events == []


def test_a_negative_size_is_an_error_and_deleting_asks_for_nothing():
    with pytest.raises(ReconcileError, match="spec.size must be 0 or more, got -1"):
        Harness(Reconciler).reconcile(podset("web", -1))
    outcome = Harness(Reconciler).reconcile(podset("web", 3, deletionTimestamp="2024-01-01T00:00:00Z"))
    assert outcome.applied == [] and outcome.status is None


def test_in_a_member_cluster_status_names_it_and_in_local_it_does_not():
    member = Harness(Reconciler).in_cluster("east", {"region": "us-east"})
    assert member.cluster.label("region") == "us-east"
    assert member.cluster.label("reconciler-host.io/cluster") == "east"
    assert member.reconcile(podset("web", 1)).status == {"podNames": [], "cluster": "east"}
    assert Harness(Reconciler).reconcile(podset("web", 1)).status == {"podNames": []}


def test_status_updates_wake_nothing_and_spec_and_label_changes_do():
    h = Harness(Reconciler)
    d = observed_deployment("web", 2)
    d["metadata"]["generation"] = 1
    progressed = {**d, "status": {"readyReplicas": 1}}
    assert not h.wakes(d, progressed), "the Deployment controller's status update"
    scaled = {**d, "metadata": {**d["metadata"], "generation": 2}, "spec": {**d["spec"], "replicas": 5}}
    assert h.wakes(d, scaled), "a spec change moves the generation"
    relabelled = pod("web-a", "web")
    relabelled["metadata"]["labels"] = {"app": "podset", "podset": "api"}
    assert h.wakes(pod("web-a", "web"), relabelled)
    running = {**pod("web-a", "web"), "status": {"phase": "Running"}}
    assert not h.wakes(pod("web-a", "web"), running)
