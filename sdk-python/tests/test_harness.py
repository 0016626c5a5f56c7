"""The harness keeps the host's rules: a plugin tested here sees what it sees
inside the host."""

import datetime

import pytest

from reconciler_sdk import KindRef, MapRule, PluginMetadata, ReconcileError, Response, plugin
from reconciler_sdk.selector import LabelSelector, SelectorError
from reconciler_sdk.testing import DEFAULT_NOW_MILLIS, Harness

POD = KindRef("", "v1", "Pod")
SECRET = KindRef("", "v1", "Secret")
CONFIGMAP = KindRef("", "v1", "ConfigMap")
COUNTER = KindRef("example.com", "v1", "Counter")


def pod(ns, name, **labels):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "name": name, "labels": labels},
            "spec": {"containers": [{"name": "c"}]}}


def counter(spec=None, **meta):
    return {"apiVersion": "example.com/v1", "kind": "Counter",
            "metadata": {"name": "c", "namespace": "team-a", "uid": "u-1", **meta}, "spec": spec or {}}


def reads_pods(ctx_call):
    """A plugin whose reconcile hands its context to ``ctx_call`` and puts
    the result in its status."""
    metadata = (PluginMetadata("counter", "1", COUNTER)
                .owns(CONFIGMAP)
                .reads_in_namespace(POD, MapRule.none(), metadata_only=True)
                .reads_kind(SECRET, MapRule.none()))

    def reconcile(primary, ctx):
        return Response().status({"seen": ctx_call(primary, ctx)})

    return plugin(metadata, reconcile)


def test_a_same_namespace_read_kind_reads_only_the_primarys_namespace():
    h = Harness(reads_pods(lambda p, ctx: [x["metadata"]["name"] for x in ctx.list(POD, p["spec"].get("ns"))]))
    h.with_objects(pod("team-a", "mine"), pod("team-b", "theirs"))
    assert h.reconcile(counter()).status == {"seen": ["mine"]}, "no namespace means the primary's"
    assert h.reconcile(counter({"ns": "team-a"})).status == {"seen": ["mine"]}
    with pytest.raises(ReconcileError, match="same-namespace read kind.*'team-b'"):
        h.reconcile(counter({"ns": "team-b"}))


def test_undeclared_kinds_cannot_be_read():
    h = Harness(reads_pods(lambda p, ctx: ctx.get(KindRef("", "v1", "Node"), None, "n1")))
    with pytest.raises(ReconcileError, match="did not declare v1 Node"):
        h.reconcile(counter())


def test_metadata_only_reads_drop_spec_status_and_managed_fields():
    p = pod("team-a", "mine", app="web")
    p["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    h = Harness(reads_pods(lambda _, ctx: ctx.get(POD, "team-a", "mine"))).with_objects(p)
    assert h.reconcile(counter()).status == {"seen": {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "team-a", "name": "mine", "labels": {"app": "web"}}}}


def test_full_reads_return_the_whole_object_in_namespace_then_name_order():
    secrets = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": ns, "name": n}, "data": {"k": "dg=="}}
               for ns, n in [("b", "x"), ("a", "z"), ("a", "y")]]
    h = Harness(reads_pods(lambda _, ctx: ctx.list(SECRET))).with_objects(*secrets)
    seen = h.reconcile(counter()).status["seen"]
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in seen] == [("a", "y"), ("a", "z"), ("b", "x")]
    assert all(s["data"] == {"k": "dg=="} for s in seen)


def test_children_are_owned_kinds_controlled_by_the_primary():
    def configmap(name, ns="team-a", **ref):
        refs = [{"apiVersion": "example.com/v1", "kind": "Counter", "name": "c", **ref}]
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns, "name": name, "ownerReferences": refs}}

    h = Harness(reads_pods(lambda _, ctx: [c["metadata"]["name"] for c in ctx.children(CONFIGMAP)]))
    h.with_objects(
        configmap("mine", uid="u-1", controller=True),
        configmap("by-name", controller=True),
        configmap("not-controller", uid="u-1"),
        configmap("another-uid", uid="u-2", controller=True),
        configmap("other-namespace", ns="team-b", uid="u-1", controller=True),
    )
    assert h.reconcile(counter()).status == {"seen": ["by-name", "mine"]}


def test_deleting_and_the_clock_follow_the_primary_and_the_test():
    h = Harness(reads_pods(lambda _, ctx: [ctx.deleting, ctx.now_millis(), ctx.now().isoformat()]))
    assert h.reconcile(counter()).status == {"seen": [False, DEFAULT_NOW_MILLIS, "2024-01-01T00:00:00+00:00"]}
    h.advance(datetime.timedelta(seconds=90))
    deleting = counter(deletionTimestamp="2024-01-01T00:00:00Z")
    assert h.reconcile(deleting).status == {"seen": [True, DEFAULT_NOW_MILLIS + 90_000, "2024-01-01T00:01:30+00:00"]}


def test_a_response_carries_events_requeue_deletes_and_finalized():
    def reconcile(primary, ctx):
        return (Response().event("Warning", "Stuck", "waiting").requeue_after(datetime.timedelta(seconds=30))
                .delete(CONFIGMAP, "team-a", "old").finalized())

    outcome = Harness(plugin(PluginMetadata("x", "1", COUNTER).owns(CONFIGMAP), reconcile)).reconcile(counter())
    assert [(e.type.value, e.reason, e.message) for e in outcome.events] == [("Warning", "Stuck", "waiting")]
    assert outcome.requeue_after == datetime.timedelta(seconds=30)
    assert [(d.api_version, d.kind, d.namespace, d.name) for d in outcome.deleted] == [("v1", "ConfigMap", "team-a", "old")]
    assert outcome.finalized


@pytest.mark.parametrize("selector,expected", [
    ("", ["a", "b", "c", "d"]),
    ("app=web", ["a", "b"]),
    ("app==web,tier!=db", ["a"]),
    ("app in (web,db)", ["a", "b", "c"]),
    ("app notin (web)", ["c", "d"]),
    ("tier", ["b", "c"]),
    ("!tier", ["a", "d"]),
])
def test_label_selectors_match_as_on_the_api_server(selector, expected):
    labels = {"a": {"app": "web"}, "b": {"app": "web", "tier": "db"}, "c": {"app": "db", "tier": "x"}, "d": {}}
    s = LabelSelector.parse(selector)
    assert [n for n, l in labels.items() if s.matches(l)] == expected


@pytest.mark.parametrize("selector,why", [
    ("app=we b", "not a valid label value"),
    ("app in web", "parenthesised set"),
    ("a,,b", "empty requirement"),
    ("app in (a", "unbalanced"),
])
def test_a_bad_selector_is_an_error_naming_it(selector, why):
    with pytest.raises(SelectorError, match=why):
        LabelSelector.parse(selector)


class CountingHost:
    """A ``HostApi`` that answers from fixed texts and counts its calls."""

    def __init__(self, listed):
        self.listed = listed
        self.calls = []

    def get(self, kind, namespace, name):
        return None

    def list(self, kind, namespace, selector):
        self.calls.append("list")
        return self.listed

    def now_millis(self):
        return DEFAULT_NOW_MILLIS

    def cluster(self):
        from reconciler_sdk.contract import ClusterInfo

        self.calls.append("cluster")
        return ClusterInfo("member-1", {"tier": "prod"})

    def log(self, level, message, fields):
        pass


def test_listed_objects_parse_in_order_and_a_bad_one_is_named():
    from reconciler_sdk.context import Context

    texts = ['{"metadata":{"name":"a"}}', '{"metadata":{"name":"b"}}', "[1, 2]"]
    listed = Context(CountingHost(texts), [], False).list(POD)
    assert [o["metadata"]["name"] for o in listed[:2]] == ["a", "b"]
    assert listed[2] == [1, 2]
    # Texts that are not one JSON value each fail alone, with what they were.
    for bad in (['{"a":1}', "{"], ['{"a":1}, {"b":2}'], ['1,2', '[3', '4]']):
        with pytest.raises(ReconcileError, match="cannot parse a listed"):
            Context(CountingHost(bad), [], False).list(POD)


def test_the_cluster_is_asked_of_the_host_once_per_reconcile():
    from reconciler_sdk.context import Context

    host = CountingHost([])
    ctx = Context(host, [], False)
    assert ctx.cluster().name == "member-1"
    assert ctx.cluster().label("tier") == "prod"
    assert host.calls == ["cluster"]
