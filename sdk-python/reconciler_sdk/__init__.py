"""Write reconciler-host plugins in Python.

A plugin module declares its metadata, defines ``reconcile(primary, ctx)``
on plain dicts, and exports both::

    from reconciler_sdk import KindRef, MapRule, PluginMetadata, Response, plugin

    METADATA = PluginMetadata("podset-py", "0.1.0", KindRef("example.com", "v1alpha1", "PodSet"))

    def reconcile(podset: dict, ctx) -> Response:
        return Response().status({"seen": True})

    Reconciler = plugin(METADATA, reconcile)

With ``validate=`` or ``apply_defaults=`` it also serves admission for its
primary kind (``reconciler_sdk.admission``).

``python -m reconciler_sdk.build`` builds the module into a component
against ``wit/reconciler.wit`` with componentize-py; ``reconciler_sdk.testing.Harness`` runs the same
module under pytest. The contract a plugin keeps (idempotent, no effects
beyond the response, the full desired state every time) is the WIT file's.
"""

from . import objects
from .admission import AdmissionRequest, AdmissionSettings, FailurePolicy, Operation, UserInfo, Verdict
from .context import Context
from .contract import (
    CONTRACT_VERSION,
    LOCAL_CLUSTER,
    Change,
    ClusterInfo,
    EventType,
    Hints,
    KindRef,
    LogLevel,
    MapRule,
    PluginMetadata,
    ReadKind,
)
from .errors import HostError, ReconcileError
from .plugin import plugin
from .response import Response

__all__ = [
    "CONTRACT_VERSION",
    "LOCAL_CLUSTER",
    "AdmissionRequest",
    "Change",
    "AdmissionSettings",
    "FailurePolicy",
    "Operation",
    "UserInfo",
    "Verdict",
    "ClusterInfo",
    "Context",
    "EventType",
    "Hints",
    "HostError",
    "KindRef",
    "LogLevel",
    "MapRule",
    "PluginMetadata",
    "ReadKind",
    "ReconcileError",
    "Response",
    "objects",
    "plugin",
]
