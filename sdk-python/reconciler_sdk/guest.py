"""The Wasm side of the boundary: the componentize-py bindings of
``wit/reconciler.wit`` and the glue between them and the SDK's types.
Importable only inside a componentize-py build (``wit_world`` is generated)."""

from __future__ import annotations

import sys
import traceback

from componentize_py_types import Err
from wit_world.exports import reconciler as wit
from wit_world.imports import cache, clock, cluster, log, types

from .contract import ClusterInfo, EventType, KindRef, LogLevel, MapRule, PluginMetadata
from .errors import ReconcileError

_LEVELS = {
    LogLevel.TRACE: log.Level.TRACE,
    LogLevel.DEBUG: log.Level.DEBUG,
    LogLevel.INFO: log.Level.INFO,
    LogLevel.WARN: log.Level.WARN,
    LogLevel.ERROR: log.Level.ERROR,
}


class WitHost:
    """``HostApi`` backed by the WIT imports. The imports raise
    ``Err(message)`` when the host refuses a call; ``Context`` turns that into
    a ``HostError``."""

    def get(self, kind, namespace, name):
        return cache.get(_kind(kind), namespace, name)

    def list(self, kind, namespace, selector):
        return cache.list(_kind(kind), namespace, selector)

    def now_millis(self):
        return clock.now()

    def cluster(self):
        info = cluster.current()
        return ClusterInfo(info.name, dict(info.labels))

    def log(self, level, message, fields):
        log.log(_LEVELS[level], message, fields)


def _kind(k: KindRef) -> types.KindRef:
    return types.KindRef(k.group, k.version, k.kind)


def _map_rule(rule: MapRule):
    if rule.rule == "label":
        return types.MapRule_Label(rule.key)
    if rule.rule == "annotation":
        return types.MapRule_Annotation(rule.key)
    if rule.rule == "same-name":
        return types.MapRule_SameName()
    return types.MapRule_None_()


def metadata_to_wit(m: PluginMetadata) -> types.PluginMetadata:
    h = m.hints
    return types.PluginMetadata(
        name=m.name,
        version=m.version,
        primary=_kind(m.primary),
        owns=[_kind(k) for k in m.owned],
        reads=[types.ReadKind(_kind(r.kind), _map_rule(r.maps_by), r.metadata_only, r.same_namespace) for r in m.reads],
        writes=[_kind(k) for k in m.written],
        finalizer=m.finalizer,
        hints=types.Hints(
            h.max_concurrent_reconciles,
            h.memory_limit_mib,
            h.timeout_ms,
            h.max_output_kib,
            h.max_events,
            h.max_applies,
            h.max_deletes,
        ),
    )


def reconcile(reconcile_fn, request: wit.ReconcileRequest) -> wit.ReconcileResponse:
    from .plugin import ReconcileRequest, dispatch

    try:
        r = dispatch(
            reconcile_fn,
            ReconcileRequest(request.primary, list(request.children), request.deleting),
            WitHost(),
        )
    except ReconcileError as e:
        raise Err(str(e)) from None
    except Exception as e:
        # A bug in the plugin: the traceback goes to stderr (the host logs it
        # under the object), the message to the Warning Event.
        traceback.print_exc(file=sys.stderr)
        raise Err(f"{type(e).__name__}: {e}") from None
    return wit.ReconcileResponse(
        apply=r.applied,
        delete=[wit.ObjectRef(d.api_version, d.kind, d.namespace, d.name) for d in r.deleted],
        status=r.status_json,
        events=[
            wit.Event(wit.EventType.NORMAL if e.type is EventType.NORMAL else wit.EventType.WARNING, e.reason, e.message)
            for e in r.events
        ],
        requeue_after_ms=r.requeue_after_ms,
        finalized=r.is_finalized,
    )
