"""{{name}}: reconciles {{api_version}} {{kind}}.

{{#custom}}
Reports the generation it has seen in ``status.observedGeneration``. Add the
objects a {{kind}} should have with ``Response().apply(obj)``, and declare
their kinds with ``.owns(KindRef(...))`` on ``METADATA``.
{{/custom}}
{{^custom}}
Logs each {{kind}} and changes nothing. Declare what it creates with
``.owns(KindRef(...))`` on ``METADATA`` and return it with
``Response().apply(obj)``.
{{/custom}}
"""

from reconciler_sdk import (
{{#admission}}
    AdmissionRequest,
{{/admission}}
    KindRef,
    PluginMetadata,
    Response,
{{#admission}}
    Verdict,
{{/admission}}
    objects,
    plugin,
)

{{const}} = KindRef("{{group}}", "{{version}}", "{{kind}}")

METADATA = PluginMetadata("{{name}}", "0.1.0", {{const}})


def reconcile(obj: dict, ctx) -> Response:
{{#custom}}
    generation = objects.metadata(obj).get("generation", 0)
    return Response().status({"observedGeneration": generation})
{{/custom}}
{{^custom}}
    ctx.info(f"reconciled {{kind}} {objects.name(obj)}")
    return Response()
{{/custom}}
{{#admission}}


{{#custom}}
def validate(request: AdmissionRequest) -> Verdict:
    """Creates and updates; an exception fails the call, which denies it."""
    size = objects.spec(request.object).get("size")
    if isinstance(size, int) and size < 0:
        return Verdict.deny(f"spec.size must be 0 or more, got {size}")
    return Verdict.allow()


def apply_defaults(obj: dict, request: AdmissionRequest) -> None:
    """Sees the object before ``validate`` does; the host turns the change
    into a JSON patch."""
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.setdefault("size", 1)
{{/custom}}
{{^custom}}
def validate(request: AdmissionRequest) -> Verdict:
    """A stub: allows everything. Deny with ``Verdict.deny(message)``."""
    return Verdict.allow()


def apply_defaults(obj: dict, request: AdmissionRequest) -> None:
    """A stub: changes nothing. Change ``obj`` and the host turns the
    change into a JSON patch."""
{{/custom}}


Reconciler = plugin(METADATA, reconcile, validate=validate, apply_defaults=apply_defaults)
{{/admission}}
{{^admission}}


Reconciler = plugin(METADATA, reconcile)
{{/admission}}
