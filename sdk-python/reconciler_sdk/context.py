"""What a plugin can observe during one reconcile, beyond its primary."""

from __future__ import annotations

import datetime
import json
from typing import Protocol

from .contract import ClusterInfo, KindRef, LogLevel
from .errors import HostError, ReconcileError


class HostApi(Protocol):
    """The host's side of the boundary: the WIT imports inside Wasm, the
    harness in native tests. Plugins use ``Context``, never this."""

    def get(self, kind: KindRef, namespace: str | None, name: str) -> str | None: ...
    def list(self, kind: KindRef, namespace: str | None, selector: str) -> list[str]: ...
    def now_millis(self) -> int: ...
    def cluster(self) -> ClusterInfo: ...
    def log(self, level: LogLevel, message: str, fields: list[tuple[str, str]]) -> None: ...


class Context:
    """The cache (as the host holds it), the owned children observed for this
    primary, the clock and the log. A refused cache call raises
    ``HostError``; let it escape and the reconcile fails with its message."""

    def __init__(self, host: HostApi, children: list[str], deleting: bool):
        self._host = host
        self._children_json = children
        self._children: list[dict] | None = None
        self._cluster: ClusterInfo | None = None
        self.deleting = deleting
        """True when the primary has a deletionTimestamp: clean up, then
        return ``Response().finalized()``."""

    def now(self) -> datetime.datetime:
        """The host's clock, timezone-aware UTC (virtual in tests)."""
        return datetime.datetime.fromtimestamp(self._host.now_millis() / 1000, datetime.timezone.utc)

    def now_millis(self) -> int:
        return self._host.now_millis()

    def cluster(self) -> ClusterInfo:
        """The cluster this object lives in: ``local`` for the host's own (and
        in ``simulate``, ``test`` and the harness unless told otherwise), or
        the member cluster's name with its source's labels. Everything else
        the reconcile sees and does stays within it; ask only to decide
        differently per cluster (``ctx.cluster().label("tier")``)."""
        # One call cannot change cluster, and asking the host costs a
        # crossing of the sandbox boundary each time.
        if self._cluster is None:
            self._cluster = self._host.cluster()
        return self._cluster

    def children(self, kind: KindRef | None = None) -> list[dict]:
        """Owned children the host observed for this primary, of ``kind``
        (every owned kind when ``None``)."""
        if self._children is None:
            self._children = _parse_all(self._children_json, "a child object")
        return [c for c in self._children if kind is None or KindRef.of(c) == kind]

    def get(self, kind: KindRef, namespace: str | None, name: str) -> dict | None:
        """One object from the cache, or ``None``. A read kind declared
        metadata-only comes as apiVersion, kind and metadata."""
        try:
            text = self._host.get(kind, namespace, name)
        except HostError:
            raise
        except Exception as e:  # the WIT import raises its own error type
            raise HostError(f"host: {_err_text(e)}") from None
        return None if text is None else parse_json(text, f"{kind} {name}")

    def list(self, kind: KindRef, namespace: str | None = None, selector: str = "") -> list[dict]:
        """Objects of ``kind`` matching a label selector (``""`` for all),
        ordered by namespace, then name."""
        try:
            texts = self._host.list(kind, namespace, selector)
        except HostError:
            raise
        except Exception as e:
            raise HostError(f"host: {_err_text(e)}") from None
        return _parse_all(texts, f"a listed {kind}")

    def log(self, level: LogLevel | str, message: str, **fields: object) -> None:
        """A structured log entry; the host tags it with plugin and object."""
        self._host.log(LogLevel(level), message, [(k, str(v)) for k, v in fields.items()])

    def info(self, message: str, **fields: object) -> None:
        self.log(LogLevel.INFO, message, **fields)

    def warn(self, message: str, **fields: object) -> None:
        self.log(LogLevel.WARN, message, **fields)


# The C scanner json.loads ends in, called directly: json.loads's own
# Python layers (decode, raw_decode, two whitespace matches) cost more than
# the parse of a small object inside the sandbox (BENCHMARKS.md, "Where a
# Python call's time goes").
_scan = json.JSONDecoder().scan_once


def parse_json(text: str, what: str):
    """``text`` as one JSON value; ``ReconcileError`` naming ``what`` if it
    is not one."""
    try:
        value, end = _scan(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError):
        pass
    # Leading or trailing whitespace, or not JSON: json.loads decides, and
    # its message says where.
    try:
        return json.loads(text)
    except ValueError as e:
        raise ReconcileError(f"cannot parse {what}: {e}") from None



def _parse_all(texts: list[str], what: str) -> list:
    return [parse_json(text, what) for text in texts]


def _err_text(e: Exception) -> str:
    value = getattr(e, "value", None)
    return value if isinstance(value, str) else str(e)
