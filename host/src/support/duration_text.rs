//! Durations as people write them in YAML and on the command line: `500ms`,
//! `90s`, `1m30s`, `2h`.

use std::time::Duration;

/// Parses a sequence of `<number><unit>` with units h, m, s, ms.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration: write it like 500ms, 90s, 1m30s or 2h");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else {
            return Err(bad());
        };
        total += unit
            .checked_mul(u32::try_from(n).map_err(|_| bad())?)
            .ok_or_else(bad)?;
        rest = &rest[len..];
    }
    Ok(total)
}

/// The canonical text of a duration: the inverse of [`parse_duration`].
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut secs = ms / 1000;
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

/// `d` for a person reading a log line: whole seconds from one second up
/// (`9m59s`, not `599008ms`), milliseconds below. Not for case files,
/// which keep [`format_duration`]'s exact text.
pub fn format_duration_for_people(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format_duration(Duration::from_secs(d.as_secs()))
    } else {
        format_duration(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn people_read_whole_seconds_from_one_second_up() {
        assert_eq!(
            format_duration_for_people(Duration::from_millis(599_008)),
            "9m59s"
        );
        assert_eq!(
            format_duration_for_people(Duration::from_millis(3_600_999)),
            "1h"
        );
        assert_eq!(
            format_duration_for_people(Duration::from_millis(1_500)),
            "1s"
        );
        assert_eq!(
            format_duration_for_people(Duration::from_millis(250)),
            "250ms"
        );
        assert_eq!(
            format_duration(Duration::from_millis(599_008)),
            "599008ms",
            "case files stay exact"
        );
    }

    #[test]
    fn round_trips_the_usual_forms() {
        for (text, ms) in [
            ("500ms", 500),
            ("90s", 90_000),
            ("1m30s", 90_000),
            ("2h", 7_200_000),
            ("1h1m1s", 3_661_000),
        ] {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(ms),
                "{text}"
            );
        }
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        for text in ["", "10", "s", "5 minutes", "1d"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
    }
}
