"""The admission of plugins/kubernetescluster, in Python: the same checks,
the same messages, passing the Rust plugin's admission golden cases.

- An update may not change ``spec.masters``, except back to the value the
  cluster started with (``status.masters``).
- ``spec.timeoutSeconds`` must be 1 or more.
- Defaulting fills an empty ``spec.version`` with ``DEFAULT_VERSION``.

Its reconcile does only what the masters rule relies on: it records
``spec.masters`` in ``status.masters`` the first time it sees a cluster.
The cluster operations themselves (Jobs, ConfigMaps, phases, the cleanup
finalizer) are the Rust plugin's; this one shows admission in Python.
"""

import json

from reconciler_sdk import (
    AdmissionRequest,
    Change,
    KindRef,
    Operation,
    PluginMetadata,
    ReconcileError,
    Response,
    Verdict,
    plugin,
)

KUBERNETES_CLUSTER = KindRef("example.com", "v1alpha1", "KubernetesCluster")

DEFAULT_VERSION = "1.33"
"""The Kubernetes version a cluster gets when its spec names none."""

DEFAULT_TIMEOUT_SECONDS = 600

# Only the spec matters here; this plugin's own status write wakes nothing.
METADATA = PluginMetadata("kubernetescluster-py", "0.1.0", KUBERNETES_CLUSTER).wake_on(
    KUBERNETES_CLUSTER, Change.generation()
)


def _spec(cluster: dict) -> dict:
    spec = cluster.get("spec")
    if not isinstance(spec, dict):
        raise ReconcileError("the KubernetesCluster has no spec")
    return spec


def _masters(cluster: dict) -> int:
    masters = _spec(cluster).get("masters")
    if not isinstance(masters, int) or isinstance(masters, bool):
        raise ReconcileError(f"spec.masters must be an integer, got {json.dumps(masters)}")
    return masters


def _started_with(cluster: dict) -> int | None:
    return (cluster.get("status") or {}).get("masters")


def validate(request: AdmissionRequest) -> Verdict:
    cluster = request.object
    if cluster is None:
        return Verdict.allow()
    timeout = _spec(cluster).get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
    if timeout < 1:
        return Verdict.deny(f"spec.timeoutSeconds must be 1 or more, got {timeout}")
    old = request.old_object
    if request.operation is Operation.UPDATE and old is not None:
        was, now = _masters(old), _masters(cluster)
        if was != now and _started_with(old) != now:
            return Verdict.deny(
                f"spec.masters cannot change after creation: it is {was}, the update asks for {now}; "
                "create a new KubernetesCluster for another control-plane size"
            )
    return Verdict.allow()


def apply_defaults(cluster: dict, request: AdmissionRequest) -> None:
    spec = cluster.get("spec")
    if isinstance(spec, dict) and spec.get("version") in (None, ""):
        spec["version"] = DEFAULT_VERSION


def reconcile(cluster: dict, ctx) -> Response:
    if ctx.deleting or _started_with(cluster) is not None:
        return Response()
    return Response().status({"masters": _masters(cluster)})


Reconciler = plugin(METADATA, reconcile, validate=validate, apply_defaults=apply_defaults)
