//! Link options of the release `reconciler-host` binary that keep its idle
//! memory small (BENCHMARKS.md, "Idle RSS").
//!
//! Most of an idle host's resident memory is its own code: the kernel maps
//! code in 64 KiB windows around each page a function runs from, so the few
//! MiB of functions that start-up and a reconcile run, scattered over 25 MiB
//! of `.text`, made 14 MiB resident. `link/symbol-order.txt` (written by
//! `scripts/symbol-order` from a profile) lists those functions, the
//! reconcile path first, and the linker places them side by side. Names the
//! file lacks or no longer matches are placed as usual, so a stale file
//! only costs memory, never correctness. The names carry hashes of the
//! crates they come from, so they match only the `release` profile of the
//! rustc and Cargo.lock they were taken with (`scripts/bench-cluster` says
//! how many still match). Relative relocations are packed
//! (`DT_RELR`, glibc 2.36 or later) so start-up reads a few KiB of them
//! instead of 1.3 MiB.
//!
//! Only for release builds for x86_64 Linux with glibc, whose default
//! linker is the bundled LLD since Rust 1.90 (the workspace needs 1.95). Set
//! `RECONCILER_HOST_PLAIN_LINK=1` to link without them (another linker,
//! an older glibc at run time).

use std::env;
use std::path::Path;

const ORDER_FILE: &str = "link/symbol-order.txt";

fn main() {
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=RECONCILER_HOST_PLAIN_LINK");
    if !wants_ordered_link() {
        return;
    }
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join(ORDER_FILE);
    if order.is_file() {
        link_arg(&format!("--symbol-ordering-file={}", order.display()));
        link_arg("--no-warn-symbol-ordering");
    }
    link_arg("-z,pack-relative-relocs");
}

fn wants_ordered_link() -> bool {
    var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && env::var_os("RECONCILER_HOST_PLAIN_LINK").is_none()
}

fn link_arg(arg: &str) {
    println!("cargo:rustc-link-arg-bin=reconciler-host=-Wl,{arg}");
}

fn var(name: &str) -> String {
    env::var(name).unwrap_or_default()
}
