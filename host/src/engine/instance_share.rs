//! Sharing the sandbox's instance pool between plugins.
//!
//! Every reconcile runs in a fresh instance taken from one pool for the
//! whole host (`--plugin-instances`), and a reconcile started with the
//! pool exhausted fails to instantiate. So the engine never starts more
//! reconciles than the pool holds, and divides it: while other plugins
//! have work waiting, no plugin holds more than its share (the pool
//! divided among the plugins with work running or waiting), so a plugin
//! with a high concurrency and a long queue cannot keep the others from
//! running. The share binds only against plugins that wait: alone, a
//! plugin may use the pool up to its own concurrency. The slots it holds
//! beyond its share come back as its reconciles end, each within its
//! deadline, and go to the plugins below their share first.
//!
//! Work that cannot start stays in its queue, due: nothing fails for want
//! of an instance.

/// One plugin's use of the pool at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PluginLoad {
    pub in_flight: usize,
    pub concurrency: usize,
    /// Whether it has work ready to start.
    pub waiting: bool,
}

/// Whether `plugins[candidate]` may start one more reconcile in a pool of
/// `capacity` instances.
pub fn may_start(plugins: &[PluginLoad], candidate: usize, capacity: usize) -> bool {
    let Some(me) = plugins.get(candidate) else {
        return false;
    };
    if me.in_flight >= me.concurrency {
        return false;
    }
    let running: usize = plugins.iter().map(|p| p.in_flight).sum();
    if running >= capacity {
        return false;
    }
    let active = plugins
        .iter()
        .enumerate()
        .filter(|(i, p)| *i == candidate || p.in_flight > 0 || p.waiting)
        .count();
    let share = (capacity / active.max(1)).max(1);
    if me.in_flight < share {
        return true;
    }
    // Beyond its share, only slots that no waiting plugin below its own
    // share has a claim on.
    let owed: usize = plugins
        .iter()
        .enumerate()
        .filter(|(i, p)| *i != candidate && p.waiting)
        .map(|(_, p)| share.min(p.concurrency).saturating_sub(p.in_flight))
        .sum();
    capacity - running > owed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(in_flight: usize, concurrency: usize, waiting: bool) -> PluginLoad {
        PluginLoad {
            in_flight,
            concurrency,
            waiting,
        }
    }

    /// Starts reconciles one at a time, always offering the first plugin
    /// first (the worst case for the others), until nothing may start.
    fn fill(mut plugins: Vec<PluginLoad>, capacity: usize) -> Vec<usize> {
        loop {
            let Some(next) = (0..plugins.len())
                .find(|&i| plugins[i].waiting && may_start(&plugins, i, capacity))
            else {
                return plugins.iter().map(|p| p.in_flight).collect();
            };
            plugins[next].in_flight += 1;
        }
    }

    #[test]
    fn a_plugin_alone_uses_the_pool_up_to_its_concurrency() {
        assert_eq!(fill(vec![load(0, 64, true)], 8), [8]);
        assert_eq!(fill(vec![load(0, 4, true), load(0, 4, false)], 8), [4, 0]);
    }

    #[test]
    fn a_greedy_plugin_leaves_the_others_their_share() {
        assert_eq!(fill(vec![load(0, 64, true), load(0, 4, true)], 8), [4, 4]);
        assert_eq!(
            fill(
                vec![load(0, 64, true), load(0, 1, true), load(0, 4, true)],
                9
            ),
            [5, 1, 3]
        );
    }

    #[test]
    fn a_plugin_over_its_share_gets_no_new_slot_while_another_waits() {
        // It took the whole pool while alone; now another has work.
        let plugins = [load(8, 64, true), load(0, 4, true)];
        assert!(!may_start(&plugins, 0, 8), "the pool is full");
        let plugins = [load(6, 64, true), load(0, 4, true)];
        assert!(!may_start(&plugins, 0, 8), "the two free slots are owed");
        assert!(may_start(&plugins, 1, 8));
    }

    #[test]
    fn more_plugins_than_instances_still_each_get_a_turn() {
        let plugins: Vec<PluginLoad> = (0..5).map(|_| load(0, 4, true)).collect();
        assert_eq!(fill(plugins, 3), [1, 1, 1, 0, 0]);
    }
}
