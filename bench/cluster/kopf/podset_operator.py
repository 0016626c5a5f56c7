"""The PodSet operator written with kopf: the baseline a Python operator
author would pick instead of reconciler-host (`scripts/bench-cluster
--baseline kopf`). The same decisions as plugins/podset and the bench's
native controller: one Deployment of `spec.size` busybox Pods per PodSet,
owned by it, and the names of its Pods in `status.podNames`; an Event when
the Deployment is created or scaled.

Written as the kopf documentation suggests: handlers for the PodSet's
creation, resumption and size changes, and one for events of the Pods
carrying the `podset` label, which refresh their PodSet's status. kopf's
own handler Events are posted only for warnings, as an author would set it.
"""

import logging

import kopf
import kubernetes
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "example.com", "v1alpha1", "podsets"
PODSET_LABEL = "podset"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    kubernetes.config.load_kube_config()
    settings.posting.level = logging.WARNING
    # As many workers as the native controller's and the host's concurrency.
    settings.batching.worker_limit = 16


def labels_of(name: str) -> dict:
    return {"app": "podset", PODSET_LABEL: name}


def pod_names(namespace: str, name: str) -> list:
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels_of(name).items()))
    pods = kubernetes.client.CoreV1Api().list_namespaced_pod(namespace, label_selector=selector)
    return sorted(p.metadata.name for p in pods.items)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec.size")
def reconcile(body, spec, name, namespace, patch, **_):
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
    patch.status["podNames"] = pod_names(namespace, name)


@kopf.on.event("", "v1", "pods", labels={PODSET_LABEL: kopf.PRESENT})
def pod_changed(labels, namespace, **_):
    name = labels[PODSET_LABEL]
    api = kubernetes.client.CustomObjectsApi()
    try:
        podset = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as e:
        if e.status == 404:
            return
        raise
    names = pod_names(namespace, name)
    if (podset.get("status") or {}).get("podNames") != names:
        api.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": {"podNames": names}}
        )
