//! A bounded run of the response fuzzer (see `reconciler_tests::response_fuzz`):
//! a few seconds of arbitrary responses against arbitrary observed state,
//! from a fixed seed so a failure reproduces. Longer runs: docs/sandbox.md's
//! Fuzzing paragraph (`RESPONSE_FUZZ_SECS`, `RESPONSE_FUZZ_SEED`).

use std::time::{Duration, Instant};

use reconciler_tests::response_fuzz::Fuzzer;

/// Long enough for a few thousand cases, short enough for every test run;
/// `RESPONSE_FUZZ_SECS` sets another (a longer run in release:
/// `RESPONSE_FUZZ_SECS=600 cargo test --release -p reconciler-tests --test response_fuzz -- --nocapture`).
const BUDGET: Duration = Duration::from_secs(4);
/// The first state of the generator; `RESPONSE_FUZZ_SEED` sets another.
const SEED: u64 = 0x5eed_1234_abcd_0001;

fn setting(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}
/// Bytes of input per case: enough for every choice a case makes.
const CASE_BYTES: usize = 512;

/// A small deterministic generator (xorshift64*): the cases are the same on
/// every run and every machine.
struct Bytes(u64);

impl Bytes {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let word = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

#[test]
fn arbitrary_responses_never_reach_past_the_declarations() {
    let fuzzer = Fuzzer::new();
    let seed = setting("RESPONSE_FUZZ_SEED", SEED).max(1);
    let budget = Duration::from_secs(setting("RESPONSE_FUZZ_SECS", BUDGET.as_secs()));
    let mut bytes = Bytes(seed);
    let mut buf = vec![0u8; CASE_BYTES];
    let start = Instant::now();
    let mut cases = 0u64;
    while start.elapsed() < budget {
        bytes.fill(&mut buf);
        if let Err(violation) = fuzzer.check(&buf) {
            panic!("case {cases} of seed {seed:#x} (input {buf:02x?}):\n{violation}");
        }
        cases += 1;
    }
    eprintln!("response_fuzz: {cases} cases in {:?}", start.elapsed());
    assert!(
        cases > 50,
        "only {cases} cases ran: the harness is too slow to find anything"
    );
}
