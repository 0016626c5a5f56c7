//! The gate the host crate's real-cluster tests share: they run only with
//! `RECONCILER_E2E=1` and `KUBECONFIG`, and otherwise say so past the test
//! harness's capture. (The tests crate has its own harness; the host crate's
//! integration tests cannot depend on it.)

use std::future::Future;
use std::io::Write as _;

/// Why the real-cluster tests do not run here, or `None` if they do.
pub fn skip_reason() -> Option<String> {
    let mut missing = Vec::new();
    match std::env::var_os("RECONCILER_E2E") {
        Some(v) if v == "1" => {}
        Some(v) => missing.push(format!("RECONCILER_E2E is {v:?}, not \"1\"")),
        None => missing.push("RECONCILER_E2E is not set".to_string()),
    }
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => {}
        Some(_) => missing.push("KUBECONFIG is empty".to_string()),
        None => missing.push("KUBECONFIG is not set".to_string()),
    }
    (!missing.is_empty()).then(|| missing.join(" and "))
}

/// Runs `body` on a runtime of its own and panics with its error; or, where
/// there is no cluster, prints `<suite>: SKIPPED <test>: <why>. <how_to_run>`
/// (the line scripts/test counts as a skip) and returns.
pub fn run_or_skip<F>(suite: &str, test: &str, how_to_run: &str, body: impl FnOnce() -> F)
where
    F: Future<Output = anyhow::Result<()>>,
{
    if let Some(why) = skip_reason() {
        // Straight to the process's stderr: the test harness captures
        // `eprintln!` of a passing test, and a skip must be seen in the log.
        let _ = writeln!(
            std::io::stderr(),
            "{suite}: SKIPPED {test}: {why}. {how_to_run}"
        );
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Err(e) = runtime.block_on(body()) {
        panic!("{e:#}");
    }
}
