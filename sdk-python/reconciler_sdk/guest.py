"""The Wasm side of the boundary: the componentize-py bindings of
``wit/reconciler.wit`` and the glue between them and the SDK's types.
Importable only inside a componentize-py build (``wit_world`` is generated)."""

from __future__ import annotations

import sys
import traceback

from componentize_py_types import Err
from wit_world.exports import reconciler as wit
from wit_world.imports import cache, clock, cluster, log, types

try:  # present only in a build of a world with admission
    from wit_world.exports import admission as wit_admission
except ImportError:
    wit_admission = None
from wit_world.exports import triggers as wit_triggers

from . import admission as sdk_admission

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


def _change(c) -> "wit_triggers.Change":
    if c.change == "any":
        return wit_triggers.Change_Any()
    if c.change == "generation":
        return wit_triggers.Change_Generation()
    if c.change == "labels":
        return wit_triggers.Change_Labels()
    if c.change == "annotations":
        return wit_triggers.Change_Annotations()
    return wit_triggers.Change_Fields(list(c.paths))


def triggers_to_wit(m: PluginMetadata) -> list:
    return [wit_triggers.KindTrigger(_kind(t.kind), [_change(c) for c in t.wake_on]) for t in m.triggers]


def _failure(e: Exception) -> Err:
    """A failed call (not a denial): the plugin's own error by its message,
    a bug with its type and the traceback on stderr (the host logs it)."""
    if isinstance(e, ReconcileError):
        return Err(str(e))
    traceback.print_exc(file=sys.stderr)
    return Err(f"{type(e).__name__}: {e}")


def reconcile(reconcile_fn, request: wit.ReconcileRequest) -> wit.ReconcileResponse:
    from .plugin import ReconcileRequest, dispatch

    try:
        r = dispatch(
            reconcile_fn,
            ReconcileRequest(request.primary, list(request.children), request.deleting),
            WitHost(),
        )
    except Exception as e:
        # The message goes to the Warning Event.
        raise _failure(e) from None
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


def settings_to_wit(s: sdk_admission.AdmissionSettings):
    return wit_admission.AdmissionSettings(
        # The SDK's operations carry the WIT enum's names as their values.
        operations=[wit_admission.Operation[op.value] for op in s.operations],
        mutating=s.mutating,
        failure_policy=(
            wit_admission.FailurePolicy.IGNORE
            if s.failure_policy is sdk_admission.FailurePolicy.IGNORE
            else wit_admission.FailurePolicy.FAIL
        ),
        timeout_ms=s.timeout_ms,
    )


def _call_from_wit(r) -> sdk_admission.AdmissionCall:
    u = r.user_info
    return sdk_admission.AdmissionCall(
        operation=sdk_admission.Operation(r.operation.name),
        object=r.object,
        old_object=r.old_object,
        user_info=sdk_admission.UserInfo(
            u.username, u.uid, tuple(u.groups), {key: tuple(values) for key, values in u.extra}
        ),
        dry_run=r.dry_run,
    )


def validate(served: sdk_admission.Admission, request):
    try:
        verdict = sdk_admission.dispatch_validate(served, _call_from_wit(request))
    except Exception as e:
        raise _failure(e) from None
    return wit_admission.Verdict(verdict.allowed, verdict.message, list(verdict.warnings))


def apply_defaults(served: sdk_admission.Admission, request):
    try:
        return sdk_admission.dispatch_defaults(served, _call_from_wit(request))
    except Exception as e:
        raise _failure(e) from None
