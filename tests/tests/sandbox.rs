//! Hostile plugins prove the sandbox: each misbehaviour is a clear error for
//! that one object, and the same host process keeps reconciling correctly.

use std::sync::Arc;

use reconciler_host::plugin::sandbox::EPOCH_TICK;
use reconciler_host::plugin::{
    CallError, LoadFailure, LoadedPlugin, ReconcileInput, Sandbox, SandboxConfig, ValidResponse,
};
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_tests::{
    example_plugin, load, sandbox, test_compile_cache_dir, test_limits, test_plugin,
};
use serde_json::{Value, json};

fn hostile_object(mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": format!("h-{mode}"), "namespace": "default", "uid": "u-1"}, "spec": {"mode": mode}})
}

fn call(
    plugin: &LoadedPlugin,
    primary: Value,
    cache: MemoryCache,
) -> Result<ValidResponse, CallError> {
    let request = cache.request_for(&primary, &plugin.metadata().owns);
    let namespace = primary["metadata"]["namespace"]
        .as_str()
        .map(str::to_string);
    plugin.reconcile(ReconcileInput {
        request,
        primary_namespace: namespace,
        object: format!(
            "default/{}",
            primary["metadata"]["name"].as_str().unwrap_or_default()
        ),
        reader: Arc::new(cache),
        now_millis: 0,
        cluster: Default::default(),
    })
}

fn hostile(mode: &str) -> Result<ValidResponse, CallError> {
    call(
        &load(&test_plugin("hostile")),
        hostile_object(mode),
        MemoryCache::new(),
    )
}

/// After any failure the same process still reconciles podset correctly, and
/// the hostile plugin itself still serves its well-behaved objects.
fn host_still_serves() {
    let podset = load(&example_plugin("podset"));
    let primary = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"size": 2}});
    let response = call(&podset, primary, MemoryCache::new()).expect("podset still reconciles");
    assert_eq!(response.apply[0].object["spec"]["replicas"], 2);
    let ok = hostile("ok").expect("the hostile plugin's well-behaved objects still reconcile");
    assert_eq!(ok.status.unwrap()["ok"], true);
}

#[test]
fn an_infinite_loop_is_stopped_by_the_deadline() {
    let err = hostile("loop").unwrap_err();
    assert!(matches!(err, CallError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out after 200 ms"), "{err}");
    assert!(
        err.to_string().contains("hints.timeoutMs"),
        "names the knob: {err}"
    );
    host_still_serves();
}

#[test]
fn a_memory_hog_traps_at_the_cap() {
    let err = hostile("hog").unwrap_err();
    assert!(matches!(err, CallError::MemoryLimit { .. }), "{err:?}");
    assert!(err.to_string().contains("memory limit of 64 MiB"), "{err}");
    host_still_serves();
}

#[test]
fn a_panic_is_reported_with_the_panic_message() {
    let err = hostile("panic").unwrap_err();
    assert!(matches!(err, CallError::Panic { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("hostile plugin panicked on purpose"),
        "{err}"
    );
    host_still_serves();
}

#[test]
fn endless_printing_hits_the_stdio_cap() {
    let err = hostile("spam").unwrap_err();
    assert!(matches!(err, CallError::StdioLimit { .. }), "{err:?}");
    host_still_serves();
}

#[test]
fn an_oversized_response_is_refused() {
    let err = hostile("oversize").unwrap_err();
    assert!(matches!(err, CallError::OutputTooLarge { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("over the output limit of 1048576 bytes"),
        "{err}"
    );
    host_still_serves();
}

#[test]
fn invalid_responses_are_refused_whole_naming_the_item() {
    for (mode, item, reason) in [
        (
            "undeclared-kind",
            "apply[0] (v1 Secret h-undeclared-kind)",
            "not declared in owns or writes",
        ),
        (
            "other-namespace",
            "apply[0] (v1 ConfigMap h-other-namespace)",
            "not the primary's namespace",
        ),
        ("missing-name", "apply[0]", "no metadata.name"),
        (
            "status-not-object",
            "status",
            "must be a JSON object, got an array",
        ),
    ] {
        match hostile(mode) {
            Err(CallError::InvalidResponse(e)) => {
                assert_eq!(e.item, item, "{mode}: {e}");
                assert!(e.reason.contains(reason), "{mode}: {e}");
            }
            other => panic!("{mode}: expected an invalid response, got {other:?}"),
        }
    }
    host_still_serves();
}

#[test]
fn reading_an_undeclared_kind_is_refused_by_the_host() {
    let err = hostile("read-undeclared").unwrap_err();
    assert!(matches!(err, CallError::Plugin(_)), "{err:?}");
    assert!(
        err.to_string().contains("did not declare v1 Secret"),
        "{err}"
    );
}

#[test]
fn a_same_namespace_read_kind_is_refused_in_another_namespace() {
    let mut cache = MemoryCache::new();
    for namespace in ["default", "kube-system"] {
        cache
            .insert(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("in-{namespace}"), "namespace": namespace}}))
            .unwrap();
    }
    let plugin = load(&test_plugin("hostile"));
    let own = call(&plugin, hostile_object("read-own-namespace"), cache.clone())
        .expect("its own namespace is readable");
    assert_eq!(own.status.unwrap()["pods"], json!(["in-default"]));
    let err = call(&plugin, hostile_object("read-other-namespace"), cache).unwrap_err();
    assert!(matches!(err, CallError::Plugin(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("v1 Pod a same-namespace read kind")
            && err.to_string().contains("not in \"kube-system\""),
        "{err}"
    );
}

#[test]
fn a_plugin_error_is_reported_as_such() {
    let err = hostile("error").unwrap_err();
    assert!(
        matches!(err, CallError::Plugin(ref m) if m == "asked to fail"),
        "{err:?}"
    );
}

#[test]
fn no_state_leaks_between_calls() {
    // Each call gets a fresh instance: a trap leaves nothing behind, and many
    // calls in a row behave identically.
    for _ in 0..3 {
        assert!(hostile("panic").is_err());
        assert!(hostile("ok").is_ok());
    }
}

#[test]
fn a_call_sees_nothing_an_earlier_call_wrote() {
    // The same loaded plugin, so the same pool slot is reused and reset
    // between calls (in place where the host keeps slots resident).
    let plugin = load(&test_plugin("hostile"));
    for call_number in 1..=4 {
        let response = call(&plugin, hostile_object("remember"), MemoryCache::new())
            .expect("remember answers");
        let status = Value::Object(response.status.expect("a status"));
        assert_eq!(
            status,
            json!({"dataCalls": 1, "bssCalls": 1, "leftoverMarkers": 0}),
            "call {call_number} saw an earlier call's memory"
        );
    }
}

#[test]
fn files_that_are_not_plugins_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    type IsExpected = fn(&LoadFailure) -> bool;
    let cases: [(&str, &[u8], IsExpected); 3] = [
        ("notes.wasm", b"hello, world", |f| {
            matches!(f, LoadFailure::NotWasm)
        }),
        ("core.wasm", b"\0asm\x01\0\0\0", |f| {
            matches!(f, LoadFailure::CoreModule)
        }),
        ("truncated.wasm", b"\0asm\x0d\0\x01\0\x07", |f| {
            matches!(f, LoadFailure::Compile(_))
        }),
    ];
    for (name, bytes, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = sandbox()
            .load(&path)
            .err()
            .unwrap_or_else(|| panic!("{name} loaded"));
        assert!(expected(&err.reason), "{name}: {err}");
        assert!(err.to_string().contains(name), "names the file: {err}");
    }
    host_still_serves();
}

/// The smallest component exporting `export`: an instance with nothing in
/// it, which is all the host looks at before it refuses a contract version.
fn component_exporting(export: &str) -> Vec<u8> {
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    // Instance section: one instance made of no exports.
    bytes.extend([0x05, 0x03, 0x01, 0x01, 0x00]);
    // Export section: that instance, under `export`.
    let name = export.as_bytes();
    let len = u8::try_from(name.len()).expect("a short export name");
    let mut section = vec![0x01, 0x00, len];
    section.extend(name);
    section.extend([0x05, 0x00, 0x00]);
    bytes.push(0x0b);
    bytes.push(u8::try_from(section.len()).expect("a short section"));
    bytes.extend(section);
    bytes
}

#[test]
fn a_plugin_built_for_contract_0_1_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.wasm");
    std::fs::write(
        &path,
        component_exporting("reconciler:plugin/reconciler@0.1.0"),
    )
    .unwrap();
    let err = sandbox()
        .load(&path)
        .err()
        .expect("a 0.1.0 plugin is refused");
    let message = err.to_string();
    assert!(
        message.contains("built for contract reconciler:plugin@0.1.0")
            && message.contains("this host speaks reconciler:plugin@0.2.3"),
        "{message}"
    );
    assert!(message.contains("old.wasm"), "names the file: {message}");
}

/// A plugin's Deployment for a PodSet of `size`, from `plugin`.
fn podset_replicas(plugin: &LoadedPlugin, size: u64) -> Value {
    let primary = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"size": size}});
    let response = call(plugin, primary, MemoryCache::new()).expect("podset reconciles");
    response.apply[0].object["spec"]["replicas"].clone()
}

/// Compiling happens on an engine of its own and the result is loaded into
/// the sandbox's engine: with no cache, into an empty cache, and from that
/// cache in a new process-like sandbox, the plugin must work the same.
#[test]
fn a_plugin_compiled_now_runs_as_one_from_the_cache() {
    use reconciler_host::plugin::{CompileSource, Sandbox, SandboxConfig};

    let path = example_plugin("podset");
    let config = |cache| SandboxConfig {
        limits: reconciler_tests::test_limits(),
        compile_cache: cache,
        ..SandboxConfig::default()
    };

    let uncached = Sandbox::new(config(None)).unwrap();
    let (plugin, report) = uncached.load_with_report(&path).unwrap();
    assert_eq!(report.source, CompileSource::Compiled);
    assert_eq!(podset_replicas(&plugin, 3), 3);

    let dir = tempfile::tempdir().unwrap();
    let first = Sandbox::new(config(Some(dir.path().to_path_buf()))).unwrap();
    let (plugin, report) = first.load_with_report(&path).unwrap();
    assert_eq!(report.source, CompileSource::Compiled);
    assert_eq!(podset_replicas(&plugin, 4), 4);
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one entry, no temporary files: {entries:?}"
    );
    assert!(entries[0].ends_with(".cwasm"), "{entries:?}");

    let restarted = Sandbox::new(config(Some(dir.path().to_path_buf()))).unwrap();
    let (plugin, report) = restarted.load_with_report(&path).unwrap();
    assert_eq!(report.source, CompileSource::Cached);
    assert_eq!(podset_replicas(&plugin, 5), 5);
}

#[test]
fn a_second_load_uses_the_compile_cache() {
    let path = example_plugin("podset");
    let _ = sandbox().load_with_report(&path).unwrap();
    let (_, report) = sandbox().load_with_report(&path).unwrap();
    assert_eq!(
        report.source,
        reconciler_host::plugin::CompileSource::Cached
    );
}

/// Deadlines cost nothing while nothing runs: the epoch ticks only during
/// calls, yet a call that spins is still stopped at its deadline.
#[test]
fn the_epoch_rests_between_calls_and_still_stops_a_spinning_one() {
    let sandbox = Sandbox::new(SandboxConfig {
        limits: test_limits(),
        compile_cache: Some(test_compile_cache_dir()),
        ..SandboxConfig::default()
    })
    .expect("create a sandbox of its own, whose ticks no other test moves");
    let plugin = sandbox
        .load(&test_plugin("hostile"))
        .unwrap_or_else(|e| panic!("{e}"));

    let before = sandbox.epoch_ticks();
    let err = call(&plugin, hostile_object("loop"), MemoryCache::new()).unwrap_err();
    assert!(matches!(err, CallError::Timeout { .. }), "{err:?}");
    assert!(
        sandbox.epoch_ticks() > before,
        "the spinning call was stopped by epoch ticks"
    );

    let idle = sandbox.epoch_ticks();
    // Ten ticks' worth of idling.
    std::thread::sleep(EPOCH_TICK * 10);
    assert_eq!(
        sandbox.epoch_ticks(),
        idle,
        "the epoch advanced while no call ran"
    );
    host_still_serves();
}

/// Resident KiB of this process's mappings of files under `dir`.
fn resident_kib_of_files_under(dir: &std::path::Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("Linux's /proc/self/smaps");
    let dir = dir.to_string_lossy();
    let mut inside = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            // A field of the mapping above: `Rss:   120 kB`.
            Some("Rss:") if inside => kib += fields.next().unwrap().parse::<u64>().unwrap(),
            Some(field) if field.ends_with(':') => {}
            // A mapping: `start-end perms offset dev inode [path]`.
            Some(_) => inside = fields.nth(4).is_some_and(|path| path.starts_with(&*dir)),
            None => {}
        }
    }
    kib
}

/// A burst of calls at once leaves each instance slot it used holding the
/// pages of the plugin's memory image it read (for a Python plugin,
/// megabytes per slot). Once the plugin has been idle for a moment they are
/// handed back, and its calls go on as before. Calls one at a time use one
/// slot, which keeps what the next call reads.
#[test]
fn an_idle_plugin_hands_back_the_pages_its_instance_slots_held() {
    use reconciler_host::plugin::idle_release::IDLE_BEFORE_RELEASE;

    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxConfig {
        compile_cache: Some(dir.path().to_path_buf()),
        ..SandboxConfig::default()
    })
    .unwrap();
    let plugin = sandbox
        .load(&example_plugin("podset-py/podset-py"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mapped = || resident_kib_of_files_under(dir.path());

    for size in 1..4 {
        assert_eq!(podset_replicas(&plugin, size), size);
    }
    let after_one_at_a_time = mapped();
    std::thread::sleep(IDLE_BEFORE_RELEASE * 4);
    assert_eq!(
        mapped(),
        after_one_at_a_time,
        "calls one at a time keep their slot"
    );

    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                for size in 1..4 {
                    assert_eq!(podset_replicas(&plugin, size), size);
                }
            });
        }
    });
    let after_burst = mapped();
    std::thread::sleep(IDLE_BEFORE_RELEASE * 4);
    let after_idle = mapped();
    assert!(
        after_idle * 4 < after_burst,
        "the compiled plugin's mappings held {after_burst} KiB after the burst and {after_idle} KiB once idle"
    );

    assert_eq!(podset_replicas(&plugin, 7), 7);
}
