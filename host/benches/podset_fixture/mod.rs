//! The request both reconcile benches time: a PodSet and 20 Pods, and the
//! input a compiled plugin gets for it.

use std::sync::Arc;

use reconciler_host::plugin::ReconcileInput;
use reconciler_sdk::contract::ReconcileRequest;
use reconciler_sdk::memory_cache::MemoryCache;
use serde_json::{Value, json};

pub fn input(request: &ReconcileRequest, cache: &Arc<MemoryCache>) -> ReconcileInput {
    ReconcileInput {
        request: request.clone(),
        primary_namespace: Some("default".into()),
        object: "default/web".into(),
        reader: cache.clone(),
        now_millis: 0,
        cluster: Default::default(),
    }
}

/// A PodSet and 20 Pods shaped like `kubectl get -o json` prints them.
pub fn fixture() -> (Value, MemoryCache) {
    let primary = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "web", "namespace": "default", "uid": "2c9d6f0e-5a4b-4d8e-9f1a-7b3c2d1e0f9a",
            "resourceVersion": "48213", "generation": 3, "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"size": 20}});
    let mut cache = MemoryCache::new();
    cache.insert(primary.clone()).expect("primary");
    for i in 0..20 {
        cache
            .insert(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("web-7d4b9c8f6-{i:05}"), "namespace": "default",
                    "uid": format!("0f1e2d3c-4b5a-6978-8a9b-{i:012}"), "resourceVersion": "48190",
                    "creationTimestamp": "2024-01-01T00:00:00Z",
                    "labels": {"app": "podset", "podset": "web", "pod-template-hash": "7d4b9c8f6"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6",
                        "uid": "9e8d7c6b-5a49-3827-1605-f4e3d2c1b0a9", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
                    "nodeName": "node-1"},
                "status": {"phase": "Running", "podIP": format!("10.244.0.{i}"), "startTime": "2024-01-01T00:00:05Z"}}))
            .expect("pod");
    }
    (primary, cache)
}
