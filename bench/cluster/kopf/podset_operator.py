"""The PodSet operator written with kopf: the baseline a Python operator
author would pick instead of reconciler-host (`scripts/bench-cluster
--baseline kopf`). The same decisions as plugins/podset and the bench's
native controller: one Deployment of `spec.size` busybox Pods per PodSet,
owned by it, and the names of its Pods in `status.podNames`; an Event when
the Deployment is created or scaled.

Written as the kopf documentation suggests: handlers for the PodSet's
creation, resumption and size changes; an in-memory index of the Pods
carrying the `podset` label (kopf's indices), so no handler lists Pods from
the API server; and a handler for those Pods' events, which refreshes their
PodSet's status when its pod names changed. kopf's own handler Events are
posted only for warnings, and sync handlers get 16 threads, as an author
would set them; it runs with `--quiet` as the host runs without per-reconcile
logs.
"""

import logging

import kopf
import kubernetes
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "example.com", "v1alpha1", "podsets"
PODSET_LABEL = "podset"


# The pod names last written to each PodSet's status, by (namespace, name).
written: dict = {}


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    kubernetes.config.load_kube_config()
    settings.posting.level = logging.WARNING
    # Threads for the sync handlers: the native controller's and the host's
    # concurrency.
    settings.execution.max_workers = 16


def labels_of(name: str) -> dict:
    return {"app": "podset", PODSET_LABEL: name}


@kopf.index("", "v1", "pods", labels={PODSET_LABEL: kopf.PRESENT, "app": "podset"})
def pods_by_podset(namespace, name, labels, **_):
    return {(namespace, labels[PODSET_LABEL]): name}


def pod_names(index, namespace: str, name: str) -> list:
    return sorted(index.get((namespace, name), []))


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.size")
def reconcile(body, spec, name, namespace, patch, pods_by_podset: kopf.Index, **_):
    size = spec.get("size", 0)
    if size < 0:
        raise kopf.PermanentError(f"spec.size must be 0 or more, got {size}")
    labels = labels_of(name)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": size,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
            },
        },
    }
    kopf.adopt(deployment, owner=body)
    apps = kubernetes.client.AppsV1Api()
    try:
        apps.create_namespaced_deployment(namespace, deployment)
        kopf.event(body, type="Normal", reason="Created", message=f"Deployment {name} with {size} replicas")
    except ApiException as e:
        if e.status != 409:
            raise
        replicas = apps.read_namespaced_deployment(name, namespace).spec.replicas
        if replicas != size:
            apps.patch_namespaced_deployment(name, namespace, {"spec": {"replicas": size}})
            kopf.event(body, type="Normal", reason="Scaled", message=f"Deployment {name} from {replicas} to {size} replicas")
    names = pod_names(pods_by_podset, namespace, name)
    patch.status["podNames"] = names
    written[(namespace, name)] = names


@kopf.on.event("", "v1", "pods", labels={PODSET_LABEL: kopf.PRESENT, "app": "podset"})
def pod_changed(labels, namespace, pods_by_podset: kopf.Index, **_):
    name = labels[PODSET_LABEL]
    names = pod_names(pods_by_podset, namespace, name)
    if written.get((namespace, name)) == names:
        return
    try:
        kubernetes.client.CustomObjectsApi().patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": {"podNames": names}}
        )
    except ApiException as e:
        if e.status != 404:
            raise
        return
    written[(namespace, name)] = names
