"""The PodSet operator in Python: the same decisions as plugins/podset.

A PodSet asks for ``spec.size`` busybox pods. The plugin answers with one
owned Deployment of that many replicas and reports the names of the pods
carrying its labels in ``status.podNames``. Pods are read through the host's
cache (metadata only, in the PodSet's namespace, mapped back by the
``podset`` label), so a pod appearing or vanishing updates the status.
"""

from reconciler_sdk import LOCAL_CLUSTER, Change, EventType, KindRef, MapRule, PluginMetadata, ReconcileError, Response, objects, plugin

PODSET = KindRef("example.com", "v1alpha1", "PodSet")
DEPLOYMENT = KindRef("apps", "v1", "Deployment")
POD = KindRef("", "v1", "Pod")

PODSET_LABEL = "podset"
"""The label that maps a Pod back to its PodSet."""

METADATA = (
    PluginMetadata("podset-py", "0.1.0", PODSET)
    .owns(DEPLOYMENT)
    .reads_in_namespace(POD, MapRule.label(PODSET_LABEL), metadata_only=True)
    # What the decision reads: the PodSet's and the Deployment's specs, the
    # Pods' names and labels. Status updates (the Deployment controller's,
    # our own) change none of it, so they wake nothing.
    .wake_on(PODSET, Change.generation())
    .wake_on(DEPLOYMENT, Change.generation())
    .wake_on(POD, Change.labels())
)


def reconcile(podset: dict, ctx) -> Response:
    if ctx.deleting:
        # The Deployment is garbage-collected through its ownerReference.
        return Response()
    name, namespace = objects.name(podset), objects.namespace(podset)
    size = objects.spec(podset).get("size", 0)
    if not isinstance(size, int) or isinstance(size, bool):
        raise ReconcileError(f"spec.size must be an integer, got {size!r}")
    if size < 0:
        raise ReconcileError(f"spec.size must be 0 or more, got {size}")

    labels = {"app": "podset", PODSET_LABEL: name}
    pods = ctx.list(POD, namespace, objects.selector_of(labels))
    pod_names = sorted(objects.name(p) for p in pods)

    response = Response().apply(deployment(name, namespace, size, labels))
    observed = ctx.children(DEPLOYMENT)
    if not observed:
        response.event(EventType.NORMAL, "Created", f"Deployment {name} with {size} replicas")
    else:
        replicas = (observed[0].get("spec") or {}).get("replicas", 1)
        if replicas != size:
            response.event(EventType.NORMAL, "Scaled", f"Deployment {name} from {replicas} to {size} replicas")
    status = {"podNames": pod_names}
    if ctx.cluster().name != LOCAL_CLUSTER:
        status["cluster"] = ctx.cluster().name
    return response.status(status)


def deployment(name: str, namespace: str | None, size: int, labels: dict) -> dict:
    metadata = {"name": name, "labels": labels}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": DEPLOYMENT.api_version,
        "kind": DEPLOYMENT.kind,
        "metadata": metadata,
        "spec": {
            "replicas": size,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "busybox", "image": "busybox:1.36", "command": ["sleep", "3600"]},
                    ]
                },
            },
        },
    }


Reconciler = plugin(METADATA, reconcile)
