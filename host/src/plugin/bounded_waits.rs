//! WASI's waits, bounded by the call's deadline.
//!
//! Epoch interruption stops a plugin only while its own code runs; inside a
//! host function it never fires. wasmtime-wasi's `poll` and `block` wait in
//! real time for as long as the plugin asks, so `std::thread::sleep(1h)`
//! (which compiles to `subscribe-duration` and `block`) would hold the call,
//! its instance and its queue slot for an hour, and a `metadata` that sleeps
//! would hang loading.
//!
//! Two ways to bound them were weighed:
//! - async bindings, every call under `tokio::time::timeout`: it bounds every
//!   import, ours included, but turns the whole call path async (instantiate,
//!   the exports, our own imports, an epoch callback that yields) for the
//!   sake of a few functions;
//! - shadowing only the functions that can wait, which is what is done here:
//!   `wasi:clocks/monotonic-clock` `subscribe-duration` and
//!   `subscribe-instant` make timers on the call's own clock
//!   ([`CallClock`]), and `wasi:io/poll` `poll` and `[method]pollable.block`
//!   never wait past the deadline.
//!
//! Every other WASI import returns at once in this sandbox: stdin is closed,
//! stdout and stderr are memory pipes (always ready; a write past their cap
//! traps), there is no preopened directory, sockets and name lookups are
//! refused, and `random` only computes. The host's own imports (`cache`,
//! `log`, `clock`) do not wait either.
//!
//! A wait, then: poll every pollable once. If one is ready, return. If only
//! timers are pending, move the call's clock to the earliest one, unless that
//! passes the deadline, which ends the call at once with the timeout error.
//! Anything else pending (nothing in this sandbox today) is waited for in
//! real time, up to what is left of the deadline.

use std::time::Instant;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::io::poll::Host as AsyncPoll;
use wasmtime_wasi::p2::{DynPollable, subscribe};
use wasmtime_wasi::runtime::{in_tokio, poll_noop, with_ambient_tokio_runtime};

use super::call_state::CallState;
use super::call_traps::NeedsBlockingThread;

/// The interfaces shadowed, at the version wasmtime-wasi defines them. A
/// wasmtime-wasi that moves to another version makes the sleep tests fail
/// (the shadow would then be a separate, unused instance).
const POLL: &str = "wasi:io/poll@0.2.12";
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// How many times one wait moves the clock before it stops trusting timers
/// to become ready (each move makes at least one ready, so one suffices).
const MAX_ADVANCES: usize = 4;

/// Replaces wasmtime-wasi's waiting functions in `linker` (which must have
/// WASI added already) with bounded ones.
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    {
        let mut clock = linker.instance(MONOTONIC_CLOCK)?;
        clock.func_wrap(
            "subscribe-duration",
            |mut store: StoreContextMut<'_, CallState>, (nanos,): (u64,)| {
                let state = store.data_mut();
                let timer = state.clock.timer_after(nanos);
                let timer = state.table.push(timer)?;
                Ok((subscribe(&mut state.table, timer)?,))
            },
        )?;
        clock.func_wrap(
            "subscribe-instant",
            |mut store: StoreContextMut<'_, CallState>, (due,): (u64,)| {
                let state = store.data_mut();
                let timer = state.clock.timer(due);
                let timer = state.table.push(timer)?;
                Ok((subscribe(&mut state.table, timer)?,))
            },
        )?;
    }
    {
        let mut poll = linker.instance(POLL)?;
        poll.func_wrap(
            "poll",
            |mut store: StoreContextMut<'_, CallState>,
             (pollables,): (Vec<Resource<DynPollable>>,)| {
                let reps: Vec<u32> = pollables.iter().map(Resource::rep).collect();
                Ok((wait(store.data_mut(), &reps)?,))
            },
        )?;
        poll.func_wrap(
            "[method]pollable.block",
            |mut store: StoreContextMut<'_, CallState>, (pollable,): (Resource<DynPollable>,)| {
                wait(store.data_mut(), &[pollable.rep()])?;
                Ok(())
            },
        )?;
    }
    linker.allow_shadowing(false);
    Ok(())
}

/// Waits until one of `pollables` is ready, within the call's deadline;
/// returns the indices of the ready ones, as `poll` does.
fn wait(state: &mut CallState, pollables: &[u32]) -> wasmtime::Result<Vec<u32>> {
    let clock = state.clock.clone();
    for _ in 0..=MAX_ADVANCES {
        clock.begin_poll();
        if let Some(ready) = poll_once(&mut state.table, pollables)? {
            return Ok(ready);
        }
        match clock.earliest_pending() {
            Some(due) if clock.advance_to(due) => continue,
            Some(_) => return Err(state.past_deadline()),
            None => break,
        }
    }
    wait_in_real_time(state, pollables)
}

/// wasmtime-wasi's own `poll`, asked once without waiting.
fn poll_once(table: &mut ResourceTable, pollables: &[u32]) -> wasmtime::Result<Option<Vec<u32>>> {
    with_ambient_tokio_runtime(|| {
        let poll = AsyncPoll::poll(table, borrowed(pollables));
        let mut poll = std::pin::pin!(poll);
        poll_noop(poll.as_mut()).transpose()
    })
}

/// wasmtime-wasi's own `poll`, for what is left of the deadline.
fn wait_in_real_time(state: &mut CallState, pollables: &[u32]) -> wasmtime::Result<Vec<u32>> {
    if !state.blocking_allowed {
        return Err(wasmtime::Error::new(NeedsBlockingThread));
    }
    let left = state.deadline.saturating_duration_since(Instant::now());
    let table = &mut state.table;
    let waited = in_tokio(async {
        tokio::time::timeout(left, AsyncPoll::poll(table, borrowed(pollables))).await
    });
    match waited {
        Ok(ready) => ready,
        Err(_elapsed) => Err(state.past_deadline()),
    }
}

fn borrowed(pollables: &[u32]) -> Vec<Resource<DynPollable>> {
    pollables
        .iter()
        .map(|rep| Resource::new_borrow(*rep))
        .collect()
}
