//! When each Lease of the ring was last seen renewed, by this replica's
//! own clock.
//!
//! A Lease's `renewTime` is stamped by its holder's clock. Comparing it
//! with our own clock trusts the two to agree: a holder whose clock runs a
//! minute ahead would count as live for a minute after it died, and one
//! whose clock runs behind would be dropped while it still reconciles. So,
//! as Kubernetes' own leader election does, a Lease is judged by when we
//! saw its `renewTime` change: it expires a lease duration after that, by
//! our monotonic clock. A Lease seen for the first time counts as renewed
//! then: a replica that just started waits a whole duration before it
//! takes the place of one it never saw renew.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// By Lease name: the `renewTime` last seen, and when it was first seen.
#[derive(Debug, Default)]
pub struct Sightings {
    by_lease: BTreeMap<String, (String, Instant)>,
}

impl Sightings {
    /// Notes that Lease `name` reads `renewed` at `now`; returns when it
    /// expires unless it is seen renewed again: `duration` after its
    /// `renewTime` was first seen to read as it does.
    pub fn expires(
        &mut self,
        name: &str,
        renewed: &str,
        duration: Duration,
        now: Instant,
    ) -> Instant {
        let seen = self
            .by_lease
            .entry(name.to_string())
            .or_insert_with(|| (renewed.to_string(), now));
        if seen.0 != renewed {
            *seen = (renewed.to_string(), now);
        }
        seen.1 + duration
    }

    /// Forgets the Leases not in `present` (deleted, or no longer read).
    pub fn keep_only<'a>(&mut self, present: impl IntoIterator<Item = &'a str>) {
        let present: std::collections::BTreeSet<&str> = present.into_iter().collect();
        self.by_lease
            .retain(|name, _| present.contains(name.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION: Duration = Duration::from_secs(15);

    #[test]
    fn a_lease_expires_a_duration_after_it_was_last_seen_renewed_whatever_it_says() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut sightings = Sightings::default();
        // Stamped an hour ahead of us: it counts from when we saw it.
        let ahead = "2026-12-05T04:00:00.000000Z";
        assert_eq!(sightings.expires("a", ahead, DURATION, at(0)), at(15));
        // Read again unchanged: still from the first sighting.
        assert_eq!(sightings.expires("a", ahead, DURATION, at(10)), at(15));
        // Renewed (its stamp changed): from now.
        let later = "2026-12-05T04:00:02.000000Z";
        assert_eq!(sightings.expires("a", later, DURATION, at(12)), at(27));
    }

    #[test]
    fn a_lease_gone_and_back_counts_from_its_return() {
        let start = Instant::now();
        let mut sightings = Sightings::default();
        sightings.expires("a", "t1", DURATION, start);
        sightings.keep_only(["b"]);
        let back = start + Duration::from_secs(40);
        assert_eq!(
            sightings.expires("a", "t1", DURATION, back),
            back + DURATION
        );
    }
}
