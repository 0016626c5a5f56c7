"""The conformance probe in Python (tests/conformance/README.md): makes the
host calls its primary's ``spec.calls`` name, reports what each returned in
``status.results``, and answers with what ``spec.respond`` holds. The same
decisions as the Rust probe (tests/conformance/probe-rust)."""

from reconciler_sdk import EventType, HostError, KindRef, MapRule, PluginMetadata, ReconcileError, Response, plugin

CORE = lambda kind: KindRef("", "v1", kind)  # noqa: E731

METADATA = (
    PluginMetadata("conformance-probe", "0.1.0", KindRef("conformance.reconciler-host.io", "v1", "Probe"))
    .owns(CORE("ConfigMap"))
    .writes(CORE("Service"))
    .reads_in_namespace(CORE("Pod"), MapRule.label("probe"), metadata_only=True)
    .reads_kind(CORE("Secret"), MapRule.none())
    .reads_kind(CORE("Namespace"), MapRule.none())
    .with_hints(max_events=2, max_applies=3, max_deletes=2)
)


def kind_of(text: str) -> KindRef:
    """``v1/Pod`` or ``apps/v1/Deployment``."""
    api_version, _, kind = text.rpartition("/")
    return KindRef.from_api_version(api_version, kind)


def shown(call: dict, objects: list[dict]):
    if call.get("names") is not True:
        return objects
    out = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace") or "", meta.get("name") or ""
        out.append(f"{ns}/{name}" if ns else name)
    return out


def refused(call):
    try:
        return call()
    except HostError:
        return {"refused": True}


def result_of(call: dict, ctx):
    if "get" in call:
        c = call["get"]
        return refused(lambda: ctx.get(kind_of(c.get("kind", "")), c.get("namespace"), c.get("name", "")))
    if "list" in call:
        c = call["list"]
        return refused(lambda: shown(c, ctx.list(kind_of(c.get("kind", "")), c.get("namespace"), c.get("selector", ""))))
    if "children" in call:
        c = call["children"]
        return shown(c, ctx.children(kind_of(c.get("kind", ""))))
    if "now" in call:
        return ctx.now_millis()
    if "cluster" in call:
        cluster = ctx.cluster()
        return {"name": cluster.name, "labels": dict(cluster.labels)}
    if "deleting" in call:
        return ctx.deleting
    raise ReconcileError(f"unknown call {call!r}")


def reconcile(probe: dict, ctx) -> Response:
    spec = probe.get("spec") or {}
    results = [result_of(call, ctx) for call in spec.get("calls") or []]
    response = Response().status({"results": results})
    respond = spec.get("respond") or {}
    for obj in respond.get("apply") or []:
        response.apply(obj)
    for d in respond.get("delete") or []:
        response.delete(kind_of(d.get("kind", "")), d.get("namespace"), d.get("name", ""))
    for e in respond.get("events") or []:
        kind = EventType.WARNING if e.get("type") == "Warning" else EventType.NORMAL
        response.event(kind, e.get("reason", ""), e.get("message", ""))
    return response


Reconciler = plugin(METADATA, reconcile)
