"""A plugin: its declared metadata and its reconcile function, exported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .admission import Admission, AdmissionSettings, DefaultsFn, ValidateFn
from .context import Context, HostApi, parse_json
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
    primary = parse_json(request.primary, "the primary object")
    response = reconcile(primary, Context(host, request.children, request.deleting))
    if not isinstance(response, Response):
        raise ReconcileError(f"reconcile returned {type(response).__name__}, not a Response")
    return response


def plugin(
    metadata: PluginMetadata,
    reconcile: ReconcileFn,
    *,
    validate: ValidateFn | None = None,
    apply_defaults: DefaultsFn | None = None,
    admission: AdmissionSettings | None = None,
) -> type:
    """The class componentize-py exports as the world's ``reconciler``
    interface. Bind it to the name ``Reconciler`` in the plugin's module::

        Reconciler = plugin(METADATA, reconcile)

    With ``validate``, ``apply_defaults`` or both, the plugin also serves
    admission for its primary kind (see ``reconciler_sdk.admission``), and
    ``python -m reconciler_sdk.build`` builds the ``plugin-with-admission``
    world for it.
    """

    declared, reconcile_fn = metadata, reconcile
    served = Admission.declare(validate, apply_defaults, admission)

    class Reconciler:
        METADATA = declared
        RECONCILE = staticmethod(reconcile_fn)
        ADMISSION = served

        def metadata(self):
            return _bindings().metadata_to_wit(declared)

        def reconcile(self, request):
            return _bindings().reconcile(reconcile_fn, request)

        class Triggers:
            """The world's ``triggers`` export (0.2.3): what
            ``PluginMetadata.wake_on`` declared, none meaning every change
            wakes (the builder's entry module binds it to ``Triggers``)."""

            def triggers(self):
                return _bindings().triggers_to_wit(declared)

    if served is not None:

        class AdmissionExport:
            """The world's ``admission`` export (componentize-py looks for
            ``Admission`` in the built module; the builder's entry module
            binds this class to that name)."""

            def settings(self):
                return _bindings().settings_to_wit(served.settings)

            def validate(self, request):
                return _bindings().validate(served, request)

            def apply_defaults(self, request):
                return _bindings().apply_defaults(served, request)

        Reconciler.Admission = AdmissionExport

    return Reconciler


def _bindings():
    if guest is None:
        raise RuntimeError("the WIT bindings are only present inside a componentize-py build")
    return guest
