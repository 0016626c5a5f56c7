//! The WASI functions that wasmtime-wasi runs by blocking on tokio, made
//! safe for a call that runs on an async worker.
//!
//! wasmtime-wasi's synchronous bindings run a few functions through
//! `in_tokio`, which calls `Handle::block_on`: the blocking writes and
//! flushes of a stream, its blocking reads, the drop of a stream,
//! `pollable.ready` and `create-udp-socket`. On one of tokio's workers that
//! panics, as a worker may not block on its own runtime. A brief call runs
//! on the worker (`engine/call_placement.rs`), so each of these is shadowed
//! here: its future is polled once, without waiting. In this sandbox it is
//! always ready at once (stdout and stderr are memory pipes, stdin is
//! closed, a socket is refused before any I/O). Should one ever not be, a
//! call that may not block ends with [`NeedsBlockingThread`] and is made
//! again on a blocking thread, where the future is driven to its end as
//! wasmtime-wasi would. `poll` and `pollable.block` are shadowed already
//! (bounded_waits.rs) and apply the same rule to their real-time wait.
//!
//! The host's own imports do not wait, but `cache.list` may build a lot of
//! JSON; it stops early on the worker instead (call_state.rs).
//!
//! The other functions that use `in_tokio` take a resource no plugin can
//! get in this sandbox: a filesystem descriptor (nothing is preopened), or a
//! TCP or UDP socket (creating either is refused: TCP's without blocking,
//! UDP's through the shadow below).

use std::future::Future;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, LinkerInstance, Resource, ResourceType};
use wasmtime_wasi::p2::bindings::io::poll::HostPollable as AsyncPollable;
use wasmtime_wasi::p2::bindings::io::streams::{
    Host as AsyncStreams, HostInputStream as AsyncInput, HostOutputStream as AsyncOutput,
    StreamError as WitStreamError,
};
use wasmtime_wasi::p2::bindings::sockets::network::{ErrorCode, Host as Network, IpAddressFamily};
use wasmtime_wasi::p2::bindings::sockets::udp_create_socket::Host as UdpCreate;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, StreamResult, UdpSocket};
use wasmtime_wasi::runtime::{in_tokio, poll_noop, with_ambient_tokio_runtime};
use wasmtime_wasi::sockets::WasiSocketsView;

use super::call_state::CallState;
use super::call_traps::NeedsBlockingThread;

/// The interfaces shadowed, at the version wasmtime-wasi defines them (as
/// in bounded_waits.rs; the tests of brief calls that print fail if they
/// move).
const STREAMS: &str = "wasi:io/streams@0.2.12";
const POLL: &str = "wasi:io/poll@0.2.12";
const UDP_CREATE_SOCKET: &str = "wasi:sockets/udp-create-socket@0.2.12";

/// `future`'s output if it is ready at once; else, where the call may
/// block, its output after waiting for it, and where it may not, the
/// [`NeedsBlockingThread`] trap.
pub(crate) fn now_or_elsewhere<F: Future>(
    blocking_allowed: bool,
    future: F,
) -> wasmtime::Result<F::Output> {
    let mut future = std::pin::pin!(future);
    if let Some(output) = with_ambient_tokio_runtime(|| poll_noop(future.as_mut())) {
        return Ok(output);
    }
    if !blocking_allowed {
        return Err(wasmtime::Error::new(NeedsBlockingThread));
    }
    Ok(in_tokio(future))
}

/// A stream operation's result in the WIT shape; a trap stays a trap.
fn lowered<T>(
    state: &mut CallState,
    result: StreamResult<T>,
) -> wasmtime::Result<Result<T, WitStreamError>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(e) => Ok(Err(AsyncStreams::convert_stream_error(
            &mut state.table,
            e,
        )?)),
    }
}

type Store<'a> = StoreContextMut<'a, CallState>;
type Streams<'a> = LinkerInstance<'a, CallState>;

/// Replaces wasmtime-wasi's functions that block on tokio in `linker`
/// (which must have WASI added already).
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    {
        let mut streams = linker.instance(STREAMS)?;
        shadow_stream_drops(&mut streams)?;
        shadow_blocking_writes(&mut streams)?;
        shadow_blocking_reads(&mut streams)?;
    }
    shadow_pollable_ready(linker)?;
    shadow_udp_create(linker)?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The drop of an output or input stream, which may flush or wait.
fn shadow_stream_drops(streams: &mut Streams<'_>) -> wasmtime::Result<()> {
    streams.resource(
        "output-stream",
        ResourceType::host::<DynOutputStream>(),
        |mut store: Store<'_>, rep| {
            let state = store.data_mut();
            now_or_elsewhere(
                state.blocking_allowed,
                AsyncOutput::drop(&mut state.table, Resource::new_own(rep)),
            )?
        },
    )?;
    streams.resource(
        "input-stream",
        ResourceType::host::<DynInputStream>(),
        |mut store: Store<'_>, rep| {
            let state = store.data_mut();
            now_or_elsewhere(
                state.blocking_allowed,
                AsyncInput::drop(&mut state.table, Resource::new_own(rep)),
            )?
        },
    )?;
    Ok(())
}

/// The blocking writes, flushes and splice of an output stream.
fn shadow_blocking_writes(streams: &mut Streams<'_>) -> wasmtime::Result<()> {
    streams.func_wrap(
        "[method]output-stream.blocking-write-and-flush",
        |mut store: Store<'_>, (stream, bytes): (Resource<DynOutputStream>, Vec<u8>)| {
            let state = store.data_mut();
            let done = now_or_elsewhere(
                state.blocking_allowed,
                AsyncOutput::blocking_write_and_flush(&mut state.table, stream, bytes),
            )?;
            Ok((lowered(state, done)?,))
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-write-zeroes-and-flush",
        |mut store: Store<'_>, (stream, len): (Resource<DynOutputStream>, u64)| {
            let state = store.data_mut();
            let done = now_or_elsewhere(
                state.blocking_allowed,
                AsyncOutput::blocking_write_zeroes_and_flush(&mut state.table, stream, len),
            )?;
            Ok((lowered(state, done)?,))
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-flush",
        |mut store: Store<'_>, (stream,): (Resource<DynOutputStream>,)| {
            let state = store.data_mut();
            let done = now_or_elsewhere(
                state.blocking_allowed,
                AsyncOutput::blocking_flush(&mut state.table, stream),
            )?;
            Ok((lowered(state, done)?,))
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-splice",
        |mut store: Store<'_>,
         (stream, from, len): (Resource<DynOutputStream>, Resource<DynInputStream>, u64)| {
            let state = store.data_mut();
            let done = now_or_elsewhere(
                state.blocking_allowed,
                AsyncOutput::blocking_splice(&mut state.table, stream, from, len),
            )?;
            Ok((lowered(state, done)?,))
        },
    )?;
    Ok(())
}

/// The blocking reads and skips of an input stream.
fn shadow_blocking_reads(streams: &mut Streams<'_>) -> wasmtime::Result<()> {
    streams.func_wrap(
        "[method]input-stream.blocking-read",
        |mut store: Store<'_>, (stream, len): (Resource<DynInputStream>, u64)| {
            let state = store.data_mut();
            let done = now_or_elsewhere(
                state.blocking_allowed,
                AsyncInput::blocking_read(&mut state.table, stream, len),
            )?;
            Ok((lowered(state, done)?,))
        },
    )?;
    streams.func_wrap(
        "[method]input-stream.blocking-skip",
        |mut store: Store<'_>, (stream, len): (Resource<DynInputStream>, u64)| {
            let state = store.data_mut();
            let done = now_or_elsewhere(
                state.blocking_allowed,
                AsyncInput::blocking_skip(&mut state.table, stream, len),
            )?;
            Ok((lowered(state, done)?,))
        },
    )?;
    Ok(())
}

/// `pollable.ready`.
fn shadow_pollable_ready(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.instance(POLL)?.func_wrap(
        "[method]pollable.ready",
        |mut store: Store<'_>, (pollable,): (Resource<DynPollable>,)| {
            let state = store.data_mut();
            let ready = now_or_elsewhere(
                state.blocking_allowed,
                AsyncPollable::ready(&mut state.table, pollable),
            )??;
            Ok((ready,))
        },
    )?;
    Ok(())
}

/// `create-udp-socket`, refused before any I/O.
fn shadow_udp_create(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.instance(UDP_CREATE_SOCKET)?.func_wrap(
        "create-udp-socket",
        |mut store: Store<'_>, (family,): (IpAddressFamily,)| {
            let state = store.data_mut();
            let may_block = state.blocking_allowed;
            let mut sockets = state.sockets();
            let created: Result<Resource<UdpSocket>, _> = now_or_elsewhere(
                may_block,
                UdpCreate::create_udp_socket(&mut sockets, family),
            )?;
            let lowered: Result<Resource<UdpSocket>, ErrorCode> = match created {
                Ok(socket) => Ok(socket),
                Err(e) => Err(Network::convert_error_code(&mut sockets, e)?),
            };
            Ok((lowered,))
        },
    )?;
    Ok(())
}
