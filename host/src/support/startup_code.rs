//! Handing the pages of code only start-up runs back to the kernel once the
//! host serves.
//!
//! Why: the release binary is linked with the functions the reconcile and
//! idle paths run side by side, then those only start-up runs (host/build.rs,
//! `link/symbol-order.txt`): reading the command line and kubeconfig,
//! installing CRDs, deserialising compiled plugins, the first lists. After
//! start-up nothing calls most of them again, yet the pages they were read
//! into stay in the process's resident set: 1.8 MiB of an idle host's 14.4
//! (BENCHMARKS.md, "Before and after the restructuring of issue 48"). The order file places the two marker functions below at either end of
//! the start-up run, and [`release_startup_code`] tells the kernel the whole
//! pages between them are not needed (`MADV_DONTNEED`). Code is never
//! written, so this loses nothing: a later call (a plugin loaded, a member
//! cluster joining) reads its page back from the page cache, as the first
//! call did. It is what a kernel does with its own init code, for a process.
//!
//! A binary linked without the order file (debug builds, another linker, a
//! stale file) places the markers side by side or out of order, and nothing
//! is released. A breakpoint a debugger set in that code is lost with its
//! page; `RECONCILER_KEEP_STARTUP_CODE=1` keeps the pages, for debugging and
//! for measuring what this saves.

/// First of the start-up run in the order file; never called.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn reconciler_host_startup_code_begins() -> u32 {
    // Distinct bodies, so that no linker folds the two markers into one.
    std::hint::black_box(0x5354_4152)
}

/// Last of the start-up run in the order file; never called.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn reconciler_host_startup_code_ends() -> u32 {
    std::hint::black_box(0x454e_4453)
}

/// More than this between the markers means they are not where the order
/// file puts them (the host's whole code is about 35 MiB).
const LONGEST_STARTUP_RUN: usize = 16 << 20;

/// The whole pages strictly between the markers, if the binary was linked
/// with them in order.
fn startup_pages(begins: usize, ends: usize, page: usize) -> Option<std::ops::Range<usize>> {
    let start = begins.checked_next_multiple_of(page)?;
    let end = ends / page * page;
    (start < end && end - start <= LONGEST_STARTUP_RUN).then_some(start..end)
}

/// How long after the host turns ready its start-up is taken to be over:
/// the tasks it started last (hot reload, the member clusters' announcer)
/// take their first steps meanwhile. `scripts/symbol-order` ends its
/// start-up profile at the same moment, so that what runs later is linked
/// where it is kept.
pub const SETTLE_AFTER_READY: std::time::Duration = std::time::Duration::from_secs(1);

/// Releases the start-up run's pages [`SETTLE_AFTER_READY`] from now, in a
/// task of the current runtime.
pub fn release_startup_code_soon() {
    tokio::spawn(async {
        tokio::time::sleep(SETTLE_AFTER_READY).await;
        release_startup_code();
    });
}

/// Releases the start-up run's pages; the bytes released (0 when the
/// binary has no such run, or off Linux).
pub fn release_startup_code() -> usize {
    if std::env::var_os("RECONCILER_KEEP_STARTUP_CODE").is_some() {
        return 0;
    }
    let begins = reconciler_host_startup_code_begins as *const () as usize;
    let ends = reconciler_host_startup_code_ends as *const () as usize;
    let Some(pages) = startup_pages(begins, ends, page_size()) else {
        return 0;
    };
    if advise_not_needed(&pages) {
        tracing::debug!(
            kib = pages.len() / 1024,
            "released the pages of code only start-up runs"
        );
        pages.len()
    } else {
        0
    }
}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

#[cfg(not(target_os = "linux"))]
fn page_size() -> usize {
    4096
}

#[cfg(target_os = "linux")]
fn advise_not_needed(pages: &std::ops::Range<usize>) -> bool {
    // SAFETY: the range is whole pages of this binary's own code, mapped
    // privately from its file and never written, so dropping them loses
    // nothing: the next instruction fetched from one faults it back in
    // from the file. No Rust reference points into code.
    let result = unsafe {
        libc::madvise(
            pages.start as *mut libc::c_void,
            pages.len(),
            libc::MADV_DONTNEED,
        )
    };
    if result != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "could not release the pages of start-up code; they stay resident"
        );
    }
    result == 0
}

#[cfg(not(target_os = "linux"))]
fn advise_not_needed(_pages: &std::ops::Range<usize>) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_pages_strictly_between_markers_in_order_are_released() {
        let page = 4096;
        // The run covers parts of pages 1 and 5: pages 2, 3 and 4 go.
        assert_eq!(
            startup_pages(page + 100, 5 * page + 10, page),
            Some(2 * page..5 * page)
        );
        // A marker on a page boundary keeps its page out.
        assert_eq!(
            startup_pages(2 * page, 4 * page, page),
            Some(2 * page..4 * page)
        );
        // Side by side (no order file), reversed, or too far apart: nothing.
        assert_eq!(startup_pages(page + 16, page + 32, page), None);
        assert_eq!(startup_pages(5 * page, page, page), None);
        assert_eq!(startup_pages(page, page + (64 << 20), page), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn code_whose_page_was_released_still_runs() {
        let page = page_size();
        let marker = reconciler_host_startup_code_begins as *const () as usize;
        let its_page = marker / page * page..marker / page * page + page;
        assert!(advise_not_needed(&its_page), "madvise refused the page");
        assert_eq!(reconciler_host_startup_code_begins(), 0x5354_4152);
        assert_eq!(reconciler_host_startup_code_ends(), 0x454e_4453);
    }
}
