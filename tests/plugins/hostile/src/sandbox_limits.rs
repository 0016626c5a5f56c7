//! Reaching past the sandbox's limits through WASI and the host's imports:
//! waiting, depending on randomness and time, flooding the log, panicking
//! at length, listing more than could ever fit.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reconciler_sdk::{Context, Error, KindRef, PartialObject, Response};
use serde_json::json;

use crate::{Hostile, config_map};

/// The response for `mode`, if it is one of this module's.
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let name = hostile.name().to_string();
    Some(match mode {
        // A WASI sleep: epoch interruption never fires inside it.
        "sleep" => {
            std::thread::sleep(Duration::from_secs(3600));
            Response::new().apply(&config_map(&name, json!({})))
        }
        // Output that depends on HashMap order (WASI insecure-seed) and on
        // the monotonic clock.
        "nondeterministic" => {
            let started = Instant::now();
            let map: HashMap<String, usize> = (0..16).map(|i| (format!("k{i}"), i)).collect();
            let order: Vec<&String> = map.keys().collect();
            std::thread::sleep(Duration::from_millis(10));
            let elapsed = started.elapsed().as_nanos() as u64;
            Response::new().status(&json!({"order": order, "elapsedNanos": elapsed}))
        }
        // Logs until the deadline stops it.
        "log-flood" => loop {
            ctx.info(&"flooding the host log ".repeat(5));
        },
        // A panic with a short first line and 100 KB after it: more than
        // the stderr cap.
        "long-panic" => panic!(
            "hostile plugin panicked with a long message\n{}",
            "x".repeat(100_000)
        ),
        // Lists every Pod of its namespace, however many there are.
        "list-large" => ctx
            .list_as::<PartialObject>(&KindRef::new("", "v1", "Pod"), hostile.namespace(), "")
            .and_then(|pods| Response::new().status(&json!({"pods": pods.len()}))),
        // Fills 56 MiB, within its 64 MiB cap, then holds it until the
        // deadline: many calls of this at once are what the host's memory
        // budget is for.
        "fill-and-spin" => {
            let filled = vec![1u8; 56 << 20];
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(
                    n.wrapping_add(u64::from(filled[n as usize % filled.len()])),
                );
            }
        }
        _ => return None,
    })
}

/// What `metadata` does first: the `sleepy-metadata` build sleeps there,
/// which used to hang every command that loads plugins.
pub(crate) fn before_metadata() {
    if cfg!(feature = "sleepy-metadata") {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
