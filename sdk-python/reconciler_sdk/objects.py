"""Helpers for Kubernetes objects as plain dicts (parsed JSON)."""

from __future__ import annotations


def metadata(obj: dict) -> dict:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def name(obj: dict) -> str:
    """``metadata.name``, or ``""``."""
    return metadata(obj).get("name") or ""


def namespace(obj: dict) -> str | None:
    """``metadata.namespace``; ``None`` for cluster-scoped objects."""
    return metadata(obj).get("namespace")


def labels(obj: dict) -> dict[str, str]:
    value = metadata(obj).get("labels")
    return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


def annotations(obj: dict) -> dict[str, str]:
    value = metadata(obj).get("annotations")
    return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


def is_deleting(obj: dict) -> bool:
    return metadata(obj).get("deletionTimestamp") is not None


def spec(obj: dict) -> dict:
    value = obj.get("spec")
    return value if isinstance(value, dict) else {}


def selector_of(wanted: dict[str, str]) -> str:
    """The label selector string (``a=b,c=d``) that selects these labels."""
    return ",".join(f"{k}={v}" for k, v in sorted(wanted.items()))
