"""Building a plugin's answer."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field

from .contract import EventType, KindRef


@dataclass
class Event:
    type: EventType
    reason: str
    message: str


@dataclass
class ObjectRef:
    api_version: str
    kind: str
    namespace: str | None
    name: str


@dataclass
class Response:
    """The desired state for one primary object.

    Return the full set of owned children every time: the host prunes the
    ones left out. Objects and status are serialised here, so a value that is
    not JSON fails the reconcile instead of reaching the host half-formed.
    """

    applied: list[str] = field(default_factory=list)
    deleted: list[ObjectRef] = field(default_factory=list)
    status_json: str | None = None
    events: list[Event] = field(default_factory=list)
    requeue_after_ms: int | None = None
    is_finalized: bool = False

    def apply(self, obj: dict) -> "Response":
        """An object to create or update (owned or written), with
        ``apiVersion``, ``kind`` and ``metadata.name``."""
        self.applied.append(_dump(obj, "an object to apply"))
        return self

    def delete(self, kind: KindRef, namespace: str | None, name: str) -> "Response":
        """An owned child to delete now."""
        self.deleted.append(ObjectRef(kind.api_version, kind.kind, namespace, name))
        return self

    def status(self, status: dict) -> "Response":
        """The desired ``.status`` of the primary (a dict)."""
        if not isinstance(status, dict):
            raise TypeError(f"the status must be a dict, got {type(status).__name__}")
        self.status_json = _dump(status, "the status")
        return self

    def event(self, type: EventType | str, reason: str, message: str) -> "Response":
        """An Event on the primary: ``EventType.NORMAL`` or ``"Warning"``."""
        self.events.append(Event(EventType(type), reason, message))
        return self

    def requeue_after(self, delay: datetime.timedelta | float) -> "Response":
        """Reconcile again after ``delay`` (a timedelta, or seconds)."""
        seconds = delay.total_seconds() if isinstance(delay, datetime.timedelta) else float(delay)
        self.requeue_after_ms = max(0, round(seconds * 1000))
        return self

    def finalized(self) -> "Response":
        """While deleting: cleanup is done, the host may drop the finalizer."""
        self.is_finalized = True
        return self


# One encoder for every call: json.dumps with arguments builds a new one
# each time, which inside the sandbox costs about as much as the encoding.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _dump(value: object, what: str) -> str:
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"cannot serialise {what}: {e}") from e
