//! A plugin that misbehaves on request, to prove the sandbox holds.
//!
//! `spec.mode` of a `Hostile` object picks the misbehaviour; every mode is a
//! way a real plugin can go wrong. The test suite builds this crate for
//! wasm32-wasip2 and checks that the host turns each into a clear error for
//! that one object and keeps serving.

mod admission;
mod finalizers;
mod flood;
mod metadata_rules;
mod ownership;
mod reads;
mod sandbox_limits;
mod scope;
mod scripted;

use reconciler_sdk::{
    Context, Error, KindRef, MapRule, Object, PluginMetadata, Reconciler, Response,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Default, Serialize, Deserialize)]
pub struct HostileSpec {
    #[serde(default)]
    pub mode: String,
    /// Names of objects a mode aims at (another's ConfigMap to delete or
    /// take over, ...).
    #[serde(default)]
    pub targets: Vec<String>,
    /// The response mode `scripted` returns.
    #[serde(default)]
    pub response: Option<serde_json::Value>,
}

pub type Hostile = Object<HostileSpec>;

pub struct Hostiles;

// Built several ways: as is; for the hot-reload tests, with `v2`, a new
// version that behaves differently, with `rival`, another plugin that claims
// the same primary kind, with `rival-version`, one that claims it in another
// version (hostile.example.com/v2), with `renamed-finalizer` and `no-finalizer`, new
// versions whose finalizer is renamed or gone; for the scope rule, with
// `cluster-scope`, a namespaced primary that also owns ClusterRoles (refused
// at load), with `cluster-primary`, a plugin of the cluster-scoped
// ClusterHostile kind; for the host limits, with `greedy`, asking for 4096
// reconciles at once, with `sleepy-metadata`, one whose `metadata` sleeps;
// for admission (admission.rs), with `admission-ignore`, one whose failure
// policy is Ignore instead of Fail.
const NAME: &str = if cfg!(any(feature = "rival", feature = "rival-version")) {
    "rival"
} else if cfg!(feature = "cluster-primary") {
    "cluster-hostile"
} else if cfg!(feature = "sleepy-metadata") {
    "sleepy"
} else {
    "hostile"
};
const VERSION: &str = if cfg!(feature = "v2") {
    "0.2.0"
} else if cfg!(feature = "renamed-finalizer") {
    "0.3.0"
} else if cfg!(feature = "no-finalizer") {
    "0.4.0"
} else {
    "0.1.0"
};
const FINALIZER: Option<&str> = if cfg!(feature = "renamed-finalizer") {
    Some("hostile.example.com/cleanup-v2")
} else if cfg!(feature = "no-finalizer") {
    None
} else {
    Some("hostile.example.com/cleanup")
};
const PRIMARY_VERSION: &str = if cfg!(feature = "rival-version") {
    "v2"
} else {
    "v1"
};
const PRIMARY_KIND: &str = if cfg!(feature = "cluster-primary") {
    "ClusterHostile"
} else {
    "Hostile"
};

pub(crate) fn config_map(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"k": "v", "version": VERSION}});
    if let (Some(cm), Some(extra)) = (cm.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            cm.insert(k.clone(), v.clone());
        }
    }
    cm
}

impl Reconciler for Hostiles {
    type Primary = Hostile;

    fn metadata() -> PluginMetadata {
        sandbox_limits::before_metadata();
        let metadata = PluginMetadata::new(
            NAME,
            VERSION,
            KindRef::new("hostile.example.com", PRIMARY_VERSION, PRIMARY_KIND),
        )
        .owns(KindRef::new("", "v1", "ConfigMap"));
        #[cfg(feature = "cluster-scope")]
        let metadata = metadata.owns(KindRef::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
        ));
        let metadata = metadata
            // Pods are read as metadata by the first version and whole by
            // v2, so a reload can be seen to change how the host watches
            // them; and only in the primary's namespace, for the
            // read-confinement modes.
            .reads_in_namespace(
                KindRef::new("", "v1", "Pod"),
                MapRule::None,
                !cfg!(feature = "v2"),
            )
            // Patched without owning: the capability tests try to sneak
            // ownership and host-owned fields in through a written kind.
            .writes(KindRef::new("", "v1", "ServiceAccount"));
        let metadata = metadata.hints(reconciler_sdk::Hints {
            max_concurrent_reconciles: cfg!(feature = "greedy").then_some(4096),
            ..Default::default()
        });
        match FINALIZER {
            Some(finalizer) => metadata.finalizer(finalizer),
            None => metadata,
        }
    }

    fn admission() -> Option<reconciler_sdk::AdmissionSettings> {
        Some(admission::settings())
    }

    fn validate(
        request: &reconciler_sdk::Admission<Hostile>,
    ) -> Result<reconciler_sdk::Verdict, Error> {
        admission::validate(request)
    }

    fn apply_defaults(
        object: &mut serde_json::Value,
        request: &reconciler_sdk::Admission<Hostile>,
    ) -> Result<(), Error> {
        admission::apply_defaults(object, request)
    }

    fn reconcile(hostile: Hostile, ctx: &Context) -> Result<Response, Error> {
        let name = hostile.name().to_string();
        if ctx.deleting() {
            // Cleanup is "done" once someone annotates the object so: tests
            // use this to hold a deletion open and then release it.
            let done = hostile.metadata.annotations.as_ref().is_some_and(|a| {
                a.get("hostile.example.com/cleanup-done")
                    .map(String::as_str)
                    == Some("true")
            });
            // It keeps its ConfigMap while cleaning up; once released, the
            // garbage collector takes it with the object.
            let response = Response::new().apply(&config_map(&name, json!({})))?;
            return Ok(if done { response.finalized() } else { response });
        }
        // Attempts to reach past the declarations, one module per area of
        // the capability rules.
        let mode = hostile.spec.mode.as_str();
        if let Some(response) = ownership::attempt(mode, &hostile, ctx)
            .or_else(|| metadata_rules::attempt(mode, &hostile, ctx))
            .or_else(|| scope::attempt(mode, &hostile, ctx))
            .or_else(|| finalizers::attempt(mode, &hostile, ctx))
            .or_else(|| reads::attempt(mode, &hostile, ctx))
            .or_else(|| scripted::attempt(mode, &hostile, ctx))
            .or_else(|| flood::attempt(mode, &hostile, ctx))
            .or_else(|| sandbox_limits::attempt(mode, &hostile, ctx))
        {
            return response;
        }
        match mode {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "print-then-loop" => {
                println!("starting a call that never ends");
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "stdio-and-sockets" => {
                // Every WASI function here that wasmtime-wasi would run by
                // blocking on tokio: a brief call must not panic the host.
                use std::io::{Read, Write};
                println!("a line on stdout");
                eprintln!("a line on stderr");
                let flushed = std::io::stdout().flush().is_ok();
                let mut input = Vec::new();
                let stdin = std::io::stdin()
                    .read_to_end(&mut input)
                    .map_err(|e| e.to_string());
                let udp = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string());
                let tcp = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string());
                Response::new().status(&json!({
                    "flushed": flushed,
                    "stdin": format!("{stdin:?}"),
                    "udpRefused": udp.is_err(),
                    "tcpRefused": tcp.is_err(),
                }))
            }
            "hog" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    // Reserve without touching: growing memory is what the
                    // cap stops, and not writing keeps this fast under any
                    // deadline.
                    hoard.push(Vec::with_capacity(1 << 20));
                    std::hint::black_box(&hoard);
                }
            }
            "panic" => panic!("hostile plugin panicked on purpose"),
            "remember" => Response::new().status(&remember()),
            "spam" => loop {
                println!("{}", "spam ".repeat(100));
            },
            "error" => Err(Error::msg("asked to fail")),
            "wrapped-base64" => {
                // Base64 wrapped in lines, as MIME encoders write it: the
                // API server decodes it and keeps it unwrapped, so the
                // ConfigMap never holds what was sent. It looks again soon,
                // as a plugin waiting to see its write does.
                let wrapped = json!({"metadata": {"name": format!("{name}-wrapped")},
                    "binaryData": {"blob": "aGVsbG8g\nd29ybGQ="}});
                Ok(Response::new()
                    .apply(&config_map(&name, wrapped))?
                    .requeue_after(std::time::Duration::from_millis(200)))
            }
            "flap" => {
                // Writes what it last observed into its own child, so every
                // apply changes the child and triggers the next reconcile:
                // a plugin that never settles.
                let seen: Vec<serde_json::Value> =
                    ctx.children_of_kind(&KindRef::new("", "v1", "ConfigMap"))?;
                let version = seen
                    .first()
                    .and_then(|c| c.pointer("/metadata/resourceVersion"))
                    .and_then(|v| v.as_str())
                    .unwrap_or("none")
                    .to_string();
                Response::new().apply(&config_map(&name, json!({"data": {"seen": version}})))
            }
            "oversize" => {
                let blob = "x".repeat(2 << 20);
                Response::new().apply(&config_map(&name, json!({"data": {"blob": blob}})))
            }
            "undeclared-kind" => Response::new().apply(&json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}
            })),
            "other-namespace" => Response::new().apply(&config_map(
                &name,
                json!({"metadata": {"name": name, "namespace": "kube-system"}}),
            )),
            "missing-name" => Response::new().apply(&config_map(&name, json!({"metadata": {}}))),
            "status-not-object" => Response::new().status(&vec![1, 2, 3]),
            "read-undeclared" => {
                let secrets: Vec<serde_json::Value> =
                    ctx.list_as(&KindRef::new("", "v1", "Secret"), hostile.namespace(), "")?;
                Response::new().status(&json!({"secrets": secrets.len()}))
            }
            "log" => {
                ctx.info("hello from the sandbox");
                println!("a line on stdout");
                Response::new().apply(&config_map(&name, json!({})))
            }
            _ => Response::new()
                .apply(&config_map(&name, json!({})))?
                .status(&json!({"ok": true})),
        }
    }
}

reconciler_sdk::export_plugin!(Hostiles);

/// Looks for what an earlier call left behind, then leaves something for the
/// next: counters in the data segment and in zero-initialised memory, and a
/// marker written over 3 MiB of heap (more than the host keeps resident per
/// instance slot, so both ways a slot is reset are seen), searched for in
/// that heap before it is written. Reading memory the allocator handed out
/// uninitialised is exactly what a plugin snooping on an earlier reconcile
/// would do; it holds this call's own freed allocations too, hence a marker
/// rather than "anything not zero".
fn remember() -> serde_json::Value {
    use std::sync::atomic::{AtomicU32, Ordering};
    static IN_DATA: AtomicU32 = AtomicU32::new(7);
    static IN_BSS: AtomicU32 = AtomicU32::new(0);
    const HEAP: usize = 3 << 20;
    const MARKER: &[u8; 16] = b"left by a call!!";
    let data_calls = IN_DATA.fetch_add(1, Ordering::Relaxed) - 6;
    let bss_calls = IN_BSS.fetch_add(1, Ordering::Relaxed) + 1;
    let layout = std::alloc::Layout::from_size_align(HEAP, 16).expect("layout");
    // SAFETY: a non-zero size; the block is only read and written within
    // its bounds and freed once.
    let leftover_markers = unsafe {
        let block = std::alloc::alloc(layout);
        if block.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let read = |at: usize| std::ptr::read_volatile(block.add(at).cast::<[u8; 16]>());
        let found = (0..HEAP / 16).filter(|&i| read(i * 16) == *MARKER).count();
        for i in 0..HEAP / 16 {
            block.add(i * 16).cast::<[u8; 16]>().write(*MARKER);
        }
        std::alloc::dealloc(block, layout);
        found
    };
    json!({"dataCalls": data_calls, "bssCalls": bss_calls, "leftoverMarkers": leftover_markers})
}
