"""What the host refuses in a response, refused by the native harness with
the host's words, so a plugin's test fails where the host would.

The rules kept here are the ones tests/conformance pins for every harness:
the caps on Events, applies and deletes (the hints', else the host's
defaults); every applied object an object with apiVersion, kind and
metadata.name, of a kind the plugin owns or writes, not twice, setting no
metadata the host or the API server owns, in the primary's namespace;
deletes of owned kinds only; Event reasons in UpperCamelCase and messages of
at most 1024 characters. The host checks more (label and annotation
syntax, names as the API server checks them); its refusal is the word.
"""

from __future__ import annotations

import json
import re

from .contract import KindRef, PluginMetadata
from .errors import ReconcileError
from .response import Response

DEFAULT_MAX_EVENTS = 25
DEFAULT_MAX_APPLIES = 500
DEFAULT_MAX_DELETES = 500

# Metadata the host or the API server sets, with who sets it, in the order
# the host checks them.
HOST_OWNED = (
    ("ownerReferences", "is set by the host (the controller reference of owned kinds)"),
    ("finalizers", "is set by the host (the plugin's declared finalizer, on its primary only)"),
    ("uid", "is set by the API server"),
    ("resourceVersion", "is set by the API server (in an apply it is a precondition that fails with a conflict)"),
    ("managedFields", "is kept by the API server (which fields each field manager set)"),
    ("deletionTimestamp", "is set by the API server when the object is deleted"),
    ("deletionGracePeriodSeconds", "is set by the API server when the object is deleted"),
    ("generation", "is set by the API server"),
    ("creationTimestamp", "is set by the API server"),
    ("selfLink", "is set by the API server"),
)

_UPPER_CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")


class InvalidResponse(ReconcileError):
    def __init__(self, item: str, reason: str):
        super().__init__(f"invalid response: {item}: {reason}")


def check_response(metadata: PluginMetadata, primary_namespace: str | None, response: Response) -> None:
    """Raises ``ReconcileError`` with the host's message for the first rule
    ``response`` breaks."""
    hints = metadata.hints
    for what, count, hint, default, name in (
        ("Events", len(response.events), hints.max_events, DEFAULT_MAX_EVENTS, "maxEvents"),
        ("objects to apply", len(response.applied), hints.max_applies, DEFAULT_MAX_APPLIES, "maxApplies"),
        ("objects to delete", len(response.deleted), hints.max_deletes, DEFAULT_MAX_DELETES, "maxDeletes"),
    ):
        limit = default if hint is None else hint
        if count > limit:
            raise ReconcileError(
                f"the response carries {count} {what}, over the limit of {limit} per response "
                f"(raise it with hints.{name})"
            )
    seen = set()
    for i, text in enumerate(response.applied):
        kind, ns, name = _check_object(metadata, primary_namespace, i, json.loads(text))
        if (kind, ns, name) in seen:
            raise InvalidResponse(f"apply[{i}] ({kind} {name})", "the same object appears twice in apply")
        seen.add((kind, ns, name))
    for i, d in enumerate(response.deleted):
        kind = KindRef.from_api_version(d.api_version, d.kind)
        if kind not in metadata.owned:
            raise InvalidResponse(f"delete[{i}] ({d.api_version} {d.kind} {d.name})", f"{kind} is not a kind this plugin owns")
        _namespace(primary_namespace, d.namespace, f"delete[{i}] ({d.api_version} {d.kind} {d.name})")
    for i, e in enumerate(response.events):
        if not _UPPER_CAMEL.match(e.reason) or len(e.reason) > 128:
            raise InvalidResponse(f"events[{i}]", f"reason {json.dumps(e.reason)} must be UpperCamelCase, at most 128 characters")
        if len(e.message) > 1024:
            raise InvalidResponse(f"events[{i}]", "message is over 1024 characters")


def _check_object(metadata: PluginMetadata, primary_namespace: str | None, i: int, obj) -> tuple:
    anonymous = f"apply[{i}]"
    if not isinstance(obj, dict):
        raise InvalidResponse(anonymous, "must be a JSON object")
    api_version, kind_name = obj.get("apiVersion"), obj.get("kind")
    if not (isinstance(api_version, str) and api_version and isinstance(kind_name, str) and kind_name):
        raise InvalidResponse(anonymous, "apiVersion and kind must be non-empty strings")
    kind = KindRef.from_api_version(api_version, kind_name)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise InvalidResponse(anonymous, f"{kind}: metadata must be a JSON object")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidResponse(anonymous, f"{kind} has no metadata.name")
    item = f"apply[{i}] ({kind} {name})"
    if kind not in metadata.owned and kind not in metadata.written:
        raise InvalidResponse(item, f"{kind} is not declared in owns or writes")
    for field, owner in HOST_OWNED:
        if meta.get(field) is not None:
            raise InvalidResponse(item, f"metadata.{field} {owner}; a plugin may not set it")
    ns = _namespace(primary_namespace, meta.get("namespace"), item)
    return kind, ns, name


def _namespace(primary: str | None, declared: str | None, item: str) -> str | None:
    """A namespaced primary confines its plugin to its own namespace; an
    absent namespace means the primary's."""
    if primary is None or declared is None:
        return primary if declared is None else declared
    if declared != primary:
        raise InvalidResponse(item, f"namespace {json.dumps(declared)} is not the primary's namespace {json.dumps(primary)}")
    return primary
