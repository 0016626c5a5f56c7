"""The contract (`wit/reconciler.wit`, `reconciler:plugin@0.2.3`) in Python.

Plain dataclasses that mirror the WIT records. The guest glue converts them
into the generated bindings; the native harness uses them directly, so a
plugin tested with pytest declares and is checked exactly as inside the host.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

CONTRACT_PACKAGE = "reconciler:plugin"
CONTRACT_VERSION = "0.2.3"
CLUSTER_NAME_LABEL = "reconciler-host.io/cluster"
LOCAL_CLUSTER = "local"


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster a reconcile runs in (WIT ``cluster.cluster-info``, 0.2.2):
    ``local`` for the host's own, or a member cluster's name, with the
    labels of its source. The labels always hold ``CLUSTER_NAME_LABEL``
    with the name."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def of(name: str, labels: dict[str, str] | None = None) -> "ClusterInfo":
        """``name`` with ``labels`` and the name label, as the host gives it."""
        return ClusterInfo(name, {**(labels or {}), CLUSTER_NAME_LABEL: name})

    def label(self, key: str) -> str | None:
        return self.labels.get(key)


@dataclass(frozen=True, order=True)
class KindRef:
    """A Kubernetes group-version-kind; the core group is ``""``."""

    group: str
    version: str
    kind: str

    @staticmethod
    def from_api_version(api_version: str, kind: str) -> "KindRef":
        group, _, version = api_version.rpartition("/")
        return KindRef(group, version, kind)

    @staticmethod
    def of(obj: dict) -> "KindRef | None":
        """The kind of an object, from its ``apiVersion`` and ``kind``."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return None
        return KindRef.from_api_version(api_version, kind)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind}"


@dataclass(frozen=True)
class MapRule:
    """How an event on a read kind finds its primary object.

    Build one with ``MapRule.label(key)``, ``MapRule.annotation(key)``,
    ``MapRule.same_name()`` or ``MapRule.none()``.
    """

    rule: str
    key: str | None = None

    @staticmethod
    def label(key: str) -> "MapRule":
        return MapRule("label", key)

    @staticmethod
    def annotation(key: str) -> "MapRule":
        return MapRule("annotation", key)

    @staticmethod
    def same_name() -> "MapRule":
        return MapRule("same-name")

    @staticmethod
    def none() -> "MapRule":
        return MapRule("none")


@dataclass(frozen=True)
class ReadKind:
    kind: KindRef
    maps_by: MapRule
    metadata_only: bool = False
    same_namespace: bool = False


@dataclass(frozen=True)
class Change:
    """A kind of change of one object that wakes its primary (WIT
    ``triggers.change``, 0.2.3).

    Build one with ``Change.any()``, ``Change.generation()`` (the spec moved,
    or deletion began), ``Change.labels()``, ``Change.annotations()`` or
    ``Change.fields("status.readyReplicas", ...)``.
    """

    change: str
    paths: tuple[str, ...] = ()

    @staticmethod
    def any() -> "Change":
        return Change("any")

    @staticmethod
    def generation() -> "Change":
        return Change("generation")

    @staticmethod
    def labels() -> "Change":
        return Change("labels")

    @staticmethod
    def annotations() -> "Change":
        return Change("annotations")

    @staticmethod
    def fields(*paths: str) -> "Change":
        return Change("fields", tuple(paths))

    def happened(self, old: dict, new: dict) -> bool:
        """Whether going from ``old`` to ``new`` is this change: the host's
        comparison (``contract/src/triggers.rs``)."""
        if self.change == "any":
            return old != new
        if self.change == "generation":
            began_deleting = _at(old, ["metadata", "deletionTimestamp"]) is None and _at(
                new, ["metadata", "deletionTimestamp"]
            ) is not None
            return _at(old, ["metadata", "generation"]) != _at(new, ["metadata", "generation"]) or began_deleting
        if self.change in ("labels", "annotations"):
            return _at(old, ["metadata", self.change]) != _at(new, ["metadata", self.change])
        return any(_at(old, p.split(".")) != _at(new, p.split(".")) for p in self.paths)


def _at(value, path: list[str]):
    """The value at ``path`` (object keys only); ``None`` when a step is
    missing or not an object, and for an empty object."""
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return None if value == {} else value


@dataclass(frozen=True)
class KindTrigger:
    """The changes of objects of ``kind`` that wake their primary."""

    kind: KindRef
    wake_on: tuple[Change, ...]


@dataclass
class Hints:
    """Requests of the sandbox; ``None`` means the host's default."""

    max_concurrent_reconciles: int | None = None
    memory_limit_mib: int | None = None
    timeout_ms: int | None = None
    max_output_kib: int | None = None
    max_events: int | None = None
    max_applies: int | None = None
    max_deletes: int | None = None


class EventType(enum.Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


class LogLevel(enum.Enum):
    TRACE = "trace"
    DEBUG = "debug"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"


class Projection(enum.Enum):
    """What of an object crosses the boundary on a cache read."""

    FULL = "full"
    METADATA_ONLY = "metadata-only"


@dataclass
class PluginMetadata:
    """What a plugin is and which kinds it may touch.

    Declared once per plugin, builder style::

        PluginMetadata("podset", "0.1.0", KindRef("example.com", "v1alpha1", "PodSet"))
            .owns(DEPLOYMENT)
            .reads_in_namespace(POD, MapRule.label("podset"), metadata_only=True)
    """

    name: str
    version: str
    primary: KindRef
    owned: list[KindRef] = field(default_factory=list)
    reads: list[ReadKind] = field(default_factory=list)
    written: list[KindRef] = field(default_factory=list)
    finalizer: str | None = None
    hints: Hints = field(default_factory=Hints)
    triggers: list[KindTrigger] = field(default_factory=list)

    def owns(self, kind: KindRef) -> "PluginMetadata":
        """Declares an owned child kind: the host sets the controller
        ownerReference, passes children back, and prunes those not returned."""
        self.owned.append(kind)
        return self

    def reads_kind(self, kind: KindRef, maps_by: MapRule, metadata_only: bool = False) -> "PluginMetadata":
        """Declares a read kind, readable in any namespace."""
        self.reads.append(ReadKind(kind, maps_by, metadata_only, False))
        return self

    def reads_in_namespace(
        self, kind: KindRef, maps_by: MapRule, metadata_only: bool = False
    ) -> "PluginMetadata":
        """Declares a read kind confined to the primary's namespace."""
        self.reads.append(ReadKind(kind, maps_by, metadata_only, True))
        return self

    def writes(self, kind: KindRef) -> "PluginMetadata":
        """Declares a kind patched without owning it."""
        self.written.append(kind)
        return self

    def wake_on(self, kind: KindRef, *changes: Change) -> "PluginMetadata":
        """Declares which changes of objects of ``kind`` (the primary, an
        owned kind or a mapped read kind) wake their primary: any one of
        ``changes``. Without it every change does. Creation and deletion
        always wake."""
        self.triggers.append(KindTrigger(kind, tuple(changes)))
        return self

    def trigger_of(self, kind: KindRef) -> tuple[Change, ...] | None:
        """The changes of ``kind`` that wake a primary; ``None``: any."""
        return next((t.wake_on for t in self.triggers if t.kind == kind), None)

    def with_finalizer(self, finalizer: str) -> "PluginMetadata":
        self.finalizer = finalizer
        return self

    def with_hints(self, **hints: int) -> "PluginMetadata":
        """Sets hints by their snake_case names (``memory_limit_mib=128``)."""
        self.hints = dataclasses.replace(self.hints, **hints)
        return self

    # The cache rules, as the host applies them to every `get` and `list`.

    def declares(self, kind: KindRef) -> bool:
        return (
            kind == self.primary
            or kind in self.owned
            or kind in self.written
            or any(r.kind == kind for r in self.reads)
        )

    def check_read(self, kind: KindRef, namespace: str | None, primary_namespace: str | None) -> str | None:
        """The namespace a ``get`` or ``list`` of ``kind`` reads, or raises
        ``PermissionError`` with the host's message."""
        if not self.declares(kind):
            raise PermissionError(
                f"plugin {self.name!r} did not declare {kind}: add it to owns, reads or writes "
                "in its metadata to read it"
            )
        confined = any(r.same_namespace and r.kind == kind for r in self.reads)
        if not confined or primary_namespace is None:
            return namespace
        if namespace is None or namespace == primary_namespace:
            return primary_namespace
        raise PermissionError(
            f"plugin {self.name!r} declared {kind} a same-namespace read kind, so it reads it only "
            f"in its primary's namespace {primary_namespace!r}, not in {namespace!r}: declare it with "
            "`reads_kind` instead of `reads_in_namespace` to read across namespaces"
        )

    def projection_of(self, kind: KindRef) -> Projection:
        if any(r.metadata_only and r.kind == kind for r in self.reads):
            return Projection.METADATA_ONLY
        return Projection.FULL
