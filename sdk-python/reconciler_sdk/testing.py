"""A native test harness: run a plugin's reconcile under pytest, no Wasm.

The harness stands in for the host with its rules: an in-memory cache
answers ``get`` and ``list`` for declared kinds only (same-namespace read
kinds only in the primary's namespace, metadata-only read kinds projected to
apiVersion, kind and metadata, label selectors, order by namespace then
name); the request is assembled as the host assembles it (children: objects
of owned kinds in the primary's namespace whose controller ownerReference is
the primary; ``deleting`` from the deletionTimestamp); the clock is whatever
the test sets. The call crosses the same JSON boundary as the compiled plugin::

    harness = Harness(Reconciler).with_objects(pod)
    outcome = harness.reconcile(podset)
    assert outcome.applied_of(DEPLOYMENT)[0]["spec"]["replicas"] == 3
"""

from __future__ import annotations

import copy
import datetime
import json
from dataclasses import dataclass, field

from .admission import AdmissionCall, AdmissionRequest, Operation, Verdict, dispatch_defaults, dispatch_validate
from .contract import LOCAL_CLUSTER, ClusterInfo, KindRef, LogLevel, PluginMetadata, Projection
from .errors import ReconcileError
from .objects import labels, name, namespace
from .plugin import ReconcileRequest, dispatch
from .response import Event, ObjectRef, Response
from .response_rules import check_response
from .selector import LabelSelector

DEFAULT_NOW_MILLIS = 1_704_067_200_000
"""The clock of a test that sets none, 2024-01-01T00:00:00Z: the same as
``reconciler-host test`` and the Rust harness."""


@dataclass
class LogEntry:
    level: LogLevel
    message: str
    fields: list[tuple[str, str]]


def metadata_only(obj: dict) -> dict:
    """What a metadata-only read returns: apiVersion, kind and metadata
    without managedFields."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": meta}


def is_controlled_by(obj: dict, owner: dict) -> bool:
    """Whether ``obj``'s controller ownerReference points at ``owner`` (by
    uid when both have one, else by kind and name)."""
    owner_uid = (owner.get("metadata") or {}).get("uid")
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is not True:
            continue
        if ref.get("uid") is not None and owner_uid is not None:
            if ref["uid"] == owner_uid:
                return True
        elif ref.get("kind") == owner.get("kind") and ref.get("name") == name(owner):
            return True
    return False


class Harness:
    """One plugin (the class ``plugin()`` returned) against an in-memory
    cache and a settable clock."""

    def __init__(self, reconciler: type, now: datetime.datetime | None = None):
        self.metadata: PluginMetadata = reconciler.METADATA
        self._reconcile = reconciler.RECONCILE
        self._admission = getattr(reconciler, "ADMISSION", None)
        self._objects: dict[tuple[KindRef, str | None, str], dict] = {}
        self.now_millis = DEFAULT_NOW_MILLIS if now is None else round(now.timestamp() * 1000)
        self.cluster = ClusterInfo.of(LOCAL_CLUSTER)
        self.logs: list[LogEntry] = []

    def with_objects(self, *objects: dict) -> "Harness":
        for obj in objects:
            self.insert(obj)
        return self

    def insert(self, obj: dict) -> None:
        """Adds or replaces an object (a broken object is a broken test:
        ``ValueError``)."""
        kind = KindRef.of(obj)
        if kind is None or not name(obj):
            raise ValueError(f"cannot cache {obj!r}: it needs apiVersion, kind and metadata.name")
        self._objects[(kind, namespace(obj), name(obj))] = json.loads(json.dumps(obj))

    def remove(self, kind: KindRef, ns: str | None, object_name: str) -> bool:
        return self._objects.pop((kind, ns, object_name), None) is not None

    def at(self, now: datetime.datetime) -> "Harness":
        self.now_millis = round(now.timestamp() * 1000)
        return self

    def in_cluster(self, cluster_name: str, labels: dict[str, str] | None = None) -> "Harness":
        """Reconciles as if in the member cluster ``cluster_name`` with
        ``labels`` (plus the name label, as the host gives it); ``local``
        until called."""
        self.cluster = ClusterInfo.of(cluster_name, labels)
        return self

    def advance(self, by: datetime.timedelta) -> None:
        self.now_millis += round(by.total_seconds() * 1000)

    def children_of(self, primary: dict) -> list[dict]:
        """The owned children the host would pass, sorted by kind,
        namespace, name."""
        owned = set(self.metadata.owned)
        ns = namespace(primary)
        return [
            obj
            for (kind, obj_ns, _), obj in sorted(self._objects.items(), key=_order)
            if kind in owned and obj_ns == ns and is_controlled_by(obj, primary)
        ]

    def wakes(self, old: dict, new: dict) -> bool:
        """Whether the host would wake a primary for this change of an
        object from ``old`` to ``new``, by the plugin's declared triggers
        (``PluginMetadata.wake_on``): the host's own comparison. A kind
        with no trigger wakes on any change; creation and deletion always
        wake."""
        kind = KindRef.of(new)
        changes = self.metadata.trigger_of(kind)
        return changes is None or any(c.happened(old, new) for c in changes)

    def reconcile(self, primary: dict) -> "Outcome":
        """Reconciles ``primary`` as the host would; the plugin's error, and
        a response the host would refuse (``reconciler_sdk.response_rules``),
        is raised as ``ReconcileError`` (any other exception is a bug and
        propagates, as it would trap the compiled plugin's call)."""
        request = ReconcileRequest(
            primary=json.dumps(primary),
            children=[json.dumps(c) for c in self.children_of(primary)],
            deleting=(primary.get("metadata") or {}).get("deletionTimestamp") is not None,
        )
        response = dispatch(self._reconcile, request, _HarnessHost(self, namespace(primary)))
        # What the host refuses, the harness refuses, in the host's words.
        check_response(self.metadata, namespace(primary), response)
        return Outcome(response)

    def admit(self, request: AdmissionRequest) -> "AdmissionOutcome":
        """Admission as the host runs it: for a plugin that serves admission
        for the request's operation, defaults first (when mutating, on
        create and update), then validates the defaulted object. A plugin
        that serves none, or not this operation, admits everything. A failed
        call (an exception) propagates: the host answers it by the failure
        policy."""
        served = self._admission
        if served is None or request.operation not in served.settings.effective_operations():
            return AdmissionOutcome(Verdict.allow(), None)
        call = AdmissionCall.of(request)
        defaulted = None
        if served.settings.mutating and request.operation in (Operation.CREATE, Operation.UPDATE):
            text = dispatch_defaults(served, call)
            if text is not None:
                defaulted = json.loads(text)
                call.object = text
        return AdmissionOutcome(dispatch_validate(served, call), defaulted)

    def admit_create(self, obj: dict) -> "AdmissionOutcome":
        return self.admit(AdmissionRequest(Operation.CREATE, obj, None))

    def admit_update(self, old: dict, new: dict) -> "AdmissionOutcome":
        return self.admit(AdmissionRequest(Operation.UPDATE, new, old))

    def admit_delete(self, old: dict) -> "AdmissionOutcome":
        return self.admit(AdmissionRequest(Operation.DELETE, None, old))

    # The cache, as the host's import answers it.

    def _get(self, kind: KindRef, ns: str | None, object_name: str, primary_ns: str | None) -> str | None:
        ns = self.metadata.check_read(kind, ns, primary_ns)
        obj = self._objects.get((kind, ns, object_name))
        return None if obj is None else json.dumps(self._project(kind, obj))

    def _list(self, kind: KindRef, ns: str | None, selector: str, primary_ns: str | None) -> list[str]:
        ns = self.metadata.check_read(kind, ns, primary_ns)
        wanted = LabelSelector.parse(selector)
        return [
            json.dumps(self._project(kind, obj))
            for (k, obj_ns, _), obj in sorted(self._objects.items(), key=_order)
            if k == kind and (ns is None or obj_ns == ns) and wanted.matches(labels(obj))
        ]

    def _project(self, kind: KindRef, obj: dict) -> dict:
        if self.metadata.projection_of(kind) is Projection.METADATA_ONLY:
            return metadata_only(obj)
        return copy.deepcopy(obj)


def _order(item):
    (kind, ns, object_name), _ = item
    return (kind, ns is not None, ns or "", object_name)


class _HarnessHost:
    def __init__(self, harness: Harness, primary_namespace: str | None):
        self._harness = harness
        self._primary_namespace = primary_namespace

    def get(self, kind, ns, object_name):
        return self._harness._get(kind, ns, object_name, self._primary_namespace)

    def list(self, kind, ns, selector):
        return self._harness._list(kind, ns, selector, self._primary_namespace)

    def now_millis(self):
        return self._harness.now_millis

    def cluster(self):
        return self._harness.cluster

    def log(self, level, message, fields):
        self._harness.logs.append(LogEntry(level, message, list(fields)))


@dataclass
class AdmissionOutcome:
    """What admission answered: the verdict on the (defaulted) object, and
    the defaulted object when defaulting changed it."""

    verdict: Verdict
    defaulted: dict | None

    @property
    def allowed(self) -> bool:
        return self.verdict.allowed

    @property
    def message(self) -> str:
        """The denial message, or "" when there is none."""
        return self.verdict.message or ""

    @property
    def warnings(self) -> list[str]:
        return self.verdict.warnings


@dataclass
class Outcome:
    """A plugin's response, with accessors for assertions."""

    response: Response
    applied: list[dict] = field(init=False)

    def __post_init__(self):
        self.applied = [json.loads(text) for text in self.response.applied]

    def applied_of(self, kind: KindRef) -> list[dict]:
        return [obj for obj in self.applied if KindRef.of(obj) == kind]

    @property
    def status(self) -> dict | None:
        s = self.response.status_json
        return None if s is None else json.loads(s)

    @property
    def events(self) -> list[Event]:
        return self.response.events

    @property
    def deleted(self) -> list[ObjectRef]:
        return self.response.deleted

    @property
    def requeue_after(self) -> datetime.timedelta | None:
        ms = self.response.requeue_after_ms
        return None if ms is None else datetime.timedelta(milliseconds=ms)

    @property
    def finalized(self) -> bool:
        return self.response.is_finalized


__all__ = ["DEFAULT_NOW_MILLIS", "AdmissionOutcome", "Harness", "LogEntry", "Outcome", "ReconcileError", "is_controlled_by", "metadata_only"]
