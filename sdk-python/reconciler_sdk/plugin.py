"""A plugin: its declared metadata and its reconcile function, exported."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from .context import Context, HostApi
from .contract import PluginMetadata
from .errors import ReconcileError
from .response import Response

try:  # the WIT bindings exist only when componentize-py builds the plugin
    from . import guest
except ImportError:
    guest = None

ReconcileFn = Callable[[dict, Context], Response]


@dataclass
class ReconcileRequest:
    """Everything the host observed for one primary (JSON text), as in WIT."""

    primary: str
    children: list[str]
    deleting: bool


def dispatch(reconcile: ReconcileFn, request: ReconcileRequest, host: HostApi) -> Response:
    """One reconcile from wire form to a ``Response``. The Wasm export and
    the native harness both go through here, so they parse identically."""
    try:
        primary = json.loads(request.primary)
    except ValueError as e:
        raise ReconcileError(f"cannot parse the primary object: {e}") from None
    response = reconcile(primary, Context(host, request.children, request.deleting))
    if not isinstance(response, Response):
        raise ReconcileError(f"reconcile returned {type(response).__name__}, not a Response")
    return response


def plugin(metadata: PluginMetadata, reconcile: ReconcileFn) -> type:
    """The class componentize-py exports as the world's ``reconciler``
    interface. Bind it to the name ``Reconciler`` in the plugin's module::

        Reconciler = plugin(METADATA, reconcile)
    """

    declared, reconcile_fn = metadata, reconcile

    class Reconciler:
        METADATA = declared
        RECONCILE = staticmethod(reconcile_fn)

        def metadata(self):
            return _bindings().metadata_to_wit(declared)

        def reconcile(self, request):
            return _bindings().reconcile(reconcile_fn, request)

    return Reconciler


def _bindings():
    if guest is None:
        raise RuntimeError("the WIT bindings are only present inside a componentize-py build")
    return guest
