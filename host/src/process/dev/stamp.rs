//! Every line `dev` prints starts with the time of day, so what happened
//! when reads straight off the terminal.

use crate::cluster::RealClock;

pub(super) fn now_millis() -> i64 {
    use crate::cluster::Clock;
    RealClock.now_millis()
}

pub(super) fn stamp(line: &str) -> String {
    let t = crate::cluster::clock::rfc3339(now_millis());
    format!("{} {line}", &t[11..19])
}
