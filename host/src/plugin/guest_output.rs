//! What a plugin writes during one call: stdout and stderr captured in
//! memory, `log` entries, and the one budget they share in the host log.
//!
//! A plugin that logs in a loop until its deadline can write over 100 MB of
//! host log in one call (measured: 121 to 151 MB in one second). So stdout,
//! stderr and `log` together put at most
//! [`HostLimits::stdio_kib`](super::HostLimits) into the host log per call,
//! each line charged its text plus [`LINE_OVERHEAD`] for what the host adds
//! around it (time, level, plugin, object). Past the budget the rest of the
//! call's lines are dropped, and one warning says how many. Writing past the pipes' capacity still traps (`StdioLimit`): a
//! plugin printing without end is broken, one logging a lot is only noisy.

use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// What the host adds to each line it logs for a plugin (timestamp, level,
/// target, field names), charged against the budget with the line's text
/// and the plugin and object names.
pub(crate) const LINE_OVERHEAD: usize = 64;

/// The longest part of a plugin's message (a panic's first line, its last
/// words before a trap) that goes into an error and so into an Event.
const MAX_QUOTED: usize = 400;

/// The host-log budget of one call.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    limit: usize,
    used: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl OutputBudget {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            used: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
        }
    }

    /// Whether a line of `text` bytes, tagged with `tags` bytes of plugin
    /// and object names, may go into the host log. Once one line is
    /// refused, every later one is too, so what was logged is a prefix of
    /// what the plugin wrote.
    pub(crate) fn admit(&mut self, text: usize, tags: usize) -> bool {
        let cost = text.saturating_add(tags).saturating_add(LINE_OVERHEAD);
        if self.dropped_lines == 0 && self.used.saturating_add(cost) <= self.limit {
            self.used += cost;
            return true;
        }
        self.dropped_lines += 1;
        self.dropped_bytes = self.dropped_bytes.saturating_add(text as u64);
        false
    }

    /// Says once, after the call, what was dropped.
    pub(crate) fn report(&self, plugin: &str, object: &str) {
        if self.dropped_lines == 0 {
            return;
        }
        tracing::warn!(
            target: "plugin",
            plugin,
            object,
            "dropped {} log lines ({} bytes) of this call: a plugin's stdout, stderr and log entries share {} KiB of host log per call",
            self.dropped_lines,
            self.dropped_bytes,
            self.limit / 1024
        );
    }

    #[cfg(test)]
    pub(crate) fn dropped(&self) -> (u64, u64) {
        (self.dropped_lines, self.dropped_bytes)
    }
}

/// Output pipes for guest stdout and stderr, kept to emit as log events.
pub(crate) struct GuestOutput {
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
    pub capacity: usize,
}

/// A Rust guest's panic, from what it wrote to stderr.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Panic {
    /// `src/lib.rs:3:5`
    pub location: String,
    /// The first line of the message, shortened to [`MAX_QUOTED`].
    pub message: String,
}

impl GuestOutput {
    pub fn new(capacity: usize) -> Self {
        Self {
            stdout: MemoryOutputPipe::new(capacity),
            stderr: MemoryOutputPipe::new(capacity),
            capacity,
        }
    }

    /// Whether the guest filled a pipe (its next write trapped).
    pub fn overflowed(&self) -> bool {
        self.stdout.contents().len() >= self.capacity
            || self.stderr.contents().len() >= self.capacity
    }

    /// The panic the guest reported on stderr, if it did: Rust prints
    /// `thread '...' panicked at src/lib.rs:3:5:` and the message on the
    /// next lines. Found even when a long message filled the pipe: the
    /// panic, not the cap it ran into, is what the user needs to hear.
    pub fn panic(&self) -> Option<Panic> {
        let bytes = self.stderr.contents();
        panic_in(&String::from_utf8_lossy(&bytes))
    }

    /// The last line the guest wrote to stderr, shortened: what a guest
    /// that aborted without panicking had to say.
    pub fn last_words(&self) -> Option<String> {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        let line = text
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty() && !is_backtrace_note(l))?;
        Some(shorten(line))
    }

    /// Emits what the guest wrote as log events, one per line, within what
    /// is left of `budget`.
    pub fn emit(&self, plugin: &str, object: &str, budget: &mut OutputBudget) {
        let tags = plugin.len() + object.len();
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = pipe.contents();
            for line in String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                if !budget.admit(line.len(), tags) {
                    continue;
                }
                if stream == "stderr" {
                    tracing::warn!(target: "plugin", plugin, object, stream, "{line}");
                } else {
                    tracing::info!(target: "plugin", plugin, object, stream, "{line}");
                }
            }
        }
    }
}

fn panic_in(text: &str) -> Option<Panic> {
    const MARK: &str = "panicked at ";
    let after = &text[text.rfind(MARK)? + MARK.len()..];
    let (location, rest) = after.split_once('\n').unwrap_or((after, ""));
    let line = rest.split_inclusive('\n').find(|l| {
        let l = l.trim();
        !l.is_empty() && !is_backtrace_note(l)
    });
    let message = match line {
        Some(line) => {
            let mut message = shorten(line.trim());
            // A line with no end was cut short by the stderr cap.
            if !line.ends_with('\n') && !message.ends_with('…') {
                message.push('…');
            }
            message
        }
        None => "(no message)".to_string(),
    };
    Some(Panic {
        location: location.trim().trim_end_matches(':').to_string(),
        message,
    })
}

fn is_backtrace_note(line: &str) -> bool {
    line.starts_with("note: run with `RUST_BACKTRACE")
}

/// `text` cut to [`MAX_QUOTED`] bytes at a character boundary, marked when cut.
fn shorten(text: &str) -> String {
    reconciler_contract::quoted::shorten(text, MAX_QUOTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_past_the_budget_are_dropped_and_counted() {
        let mut budget = OutputBudget::new(1024);
        let tags = 10;
        let mut admitted: u64 = 0;
        for _ in 0..100 {
            if budget.admit(100, tags) {
                admitted += 1;
            }
        }
        assert_eq!(admitted as usize, 1024 / (100 + tags + LINE_OVERHEAD));
        assert_eq!(budget.dropped(), (100 - admitted, (100 - admitted) * 100));
    }

    #[test]
    fn after_the_first_dropped_line_every_line_is_dropped() {
        let mut budget = OutputBudget::new(200);
        assert!(!budget.admit(500, 0));
        assert!(!budget.admit(1, 0), "the log stays a prefix");
        assert_eq!(budget.dropped(), (2, 501));
    }

    #[test]
    fn a_panic_gives_its_location_and_first_line() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:3:5:\nfirst line\nsecond line\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_in(stderr),
            Some(Panic {
                location: "src/lib.rs:3:5".into(),
                message: "first line".into()
            })
        );
    }

    #[test]
    fn a_long_panic_message_is_shortened() {
        let stderr = format!(
            "thread '<unnamed>' panicked at src/lib.rs:3:5:\n{}",
            "x".repeat(100_000)
        );
        let panic = panic_in(&stderr).unwrap();
        assert!(panic.message.starts_with("xxx"), "{panic:?}");
        assert!(panic.message.ends_with('…'), "{panic:?}");
        assert!(
            panic.message.len() < MAX_QUOTED + 4,
            "{}",
            panic.message.len()
        );
    }

    #[test]
    fn no_panic_without_the_mark() {
        assert_eq!(panic_in("error: something\n"), None);
    }

    #[test]
    fn shortening_respects_characters() {
        let text = "é".repeat(MAX_QUOTED);
        let short = shorten(&text);
        assert!(short.ends_with('…'));
        assert!(short.len() <= MAX_QUOTED + '…'.len_utf8());
    }
}
