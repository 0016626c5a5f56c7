//! One budget for the linear memory of every sandbox call at once.
//!
//! Each call is capped on its own (`hints.memoryLimitMib`), but a pool of
//! 64 instances at 64 MiB each is 4 GiB: far past what a pod is given, and
//! an OOM kill takes every plugin down, then again on restart, since every
//! primary is queued again at start. So the host charges each growth of a
//! call's memory (and its initial memory) to one budget
//! (`--plugin-memory-total-mib`) and refuses growth past it; the call then
//! fails with an error of its own, naming the budget, rather than a trap
//! that looks like the plugin's fault.
//!
//! The budget is shared fairly. Every loaded plugin has an account, and the
//! admission calls of all plugins one more; each account holds a reserve of
//! one share (the budget divided by the accounts plus one), and the last
//! share is common. A call may grow as long as what is left covers the
//! unused reserves of every other account: so a plugin whose calls fill
//! their memory may use its own reserve and whatever no one else reserved,
//! and can never take the reserve another plugin, or admission, counts on.
//! Calls with no account (a plugin's `metadata` while it loads) respect
//! every reserve.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The host-wide budget. Cheap to share; see the module documentation.
#[derive(Debug)]
pub struct MemoryBudget {
    total: usize,
    state: Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Bytes charged to each account, by id.
    accounts: BTreeMap<u64, usize>,
    next_id: u64,
    /// Bytes charged in all, accounts or not.
    used: usize,
}

/// What one plugin's calls (or all admission calls) are charged to, for as
/// long as it is alive.
#[derive(Debug)]
pub struct MemoryAccount {
    budget: Arc<MemoryBudget>,
    id: u64,
}

/// The memory one call holds: given back when the call's store is dropped.
#[derive(Debug)]
pub(crate) struct MemoryCharge {
    budget: Arc<MemoryBudget>,
    account: Option<Arc<MemoryAccount>>,
    bytes: usize,
}

impl MemoryBudget {
    pub fn new(total_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            total: total_bytes,
            state: Mutex::default(),
        })
    }

    pub fn total_bytes(&self) -> usize {
        self.total
    }

    /// Bytes of guest memory charged now, all calls together.
    pub fn used_bytes(&self) -> usize {
        self.ledger().used
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new account with a reserve of its own.
    pub fn open_account(self: &Arc<Self>) -> Arc<MemoryAccount> {
        let mut ledger = self.ledger();
        let id = ledger.next_id;
        ledger.next_id += 1;
        ledger.accounts.insert(id, 0);
        Arc::new(MemoryAccount {
            budget: self.clone(),
            id,
        })
    }

    /// A charge for one call that has no account (a plugin loading): it
    /// respects every account's reserve.
    pub(crate) fn charge(self: &Arc<Self>) -> MemoryCharge {
        MemoryCharge {
            budget: self.clone(),
            account: None,
            bytes: 0,
        }
    }

    /// Whether `account` may take `bytes` more, and if so takes them.
    fn take(&self, account: Option<u64>, bytes: usize) -> bool {
        let mut ledger = self.ledger();
        let reserve = self.total / (ledger.accounts.len() + 1);
        let others_unused: usize = ledger
            .accounts
            .iter()
            .filter(|(id, _)| Some(**id) != account)
            .map(|(_, used)| reserve.saturating_sub(*used))
            .sum();
        let after = ledger.used.saturating_add(bytes);
        if after.saturating_add(others_unused) > self.total {
            return false;
        }
        ledger.used = after;
        if let Some(used) = account.and_then(|id| ledger.accounts.get_mut(&id)) {
            *used += bytes;
        }
        true
    }

    fn give_back(&self, account: Option<u64>, bytes: usize) {
        let mut ledger = self.ledger();
        ledger.used = ledger.used.saturating_sub(bytes);
        if let Some(used) = account.and_then(|id| ledger.accounts.get_mut(&id)) {
            *used = used.saturating_sub(bytes);
        }
    }
}

impl MemoryAccount {
    /// The budget this account draws on.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// A charge for one call, to this account.
    pub(crate) fn charge(self: &Arc<Self>) -> MemoryCharge {
        MemoryCharge {
            budget: self.budget.clone(),
            account: Some(self.clone()),
            bytes: 0,
        }
    }
}

impl Drop for MemoryAccount {
    fn drop(&mut self) {
        // Every charge holds its account: none is left when it closes.
        self.budget.ledger().accounts.remove(&self.id);
    }
}

impl MemoryCharge {
    /// Takes `bytes` more for this call; false when the budget refuses.
    pub(crate) fn grow(&mut self, bytes: usize) -> bool {
        let account = self.account.as_ref().map(|a| a.id);
        let granted = self.budget.take(account, bytes);
        if granted {
            self.bytes += bytes;
        }
        granted
    }

    pub(crate) fn total_bytes(&self) -> usize {
        self.budget.total
    }
}

impl Drop for MemoryCharge {
    fn drop(&mut self) {
        let account = self.account.as_ref().map(|a| a.id);
        self.budget.give_back(account, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_plugin_alone_may_use_all_but_the_reserves_of_the_others() {
        let budget = MemoryBudget::new(300 * MIB);
        let greedy = budget.open_account();
        let _idle = budget.open_account();
        // Three accounts of nothing: reserves of 100 MiB for the idle
        // plugin, which the greedy one may not take.
        let mut calls: Vec<MemoryCharge> = Vec::new();
        loop {
            let mut call = greedy.charge();
            if !call.grow(50 * MIB) {
                break;
            }
            calls.push(call);
        }
        assert_eq!(calls.len(), 4, "200 of 300 MiB: the idle plugin keeps 100");
        assert_eq!(budget.used_bytes(), 200 * MIB);
        drop(calls);
        assert_eq!(budget.used_bytes(), 0, "every call gave its memory back");
    }

    #[test]
    fn another_plugin_still_gets_its_reserve_when_the_greedy_one_is_full() {
        let budget = MemoryBudget::new(300 * MIB);
        let greedy = budget.open_account();
        let other = budget.open_account();
        let mut held = greedy.charge();
        assert!(held.grow(200 * MIB));
        assert!(!greedy.charge().grow(MIB), "its part is full");
        let mut call = other.charge();
        assert!(call.grow(100 * MIB), "the other's reserve is whole");
        assert!(!call.grow(MIB), "and the budget is spent");
        // A plugin loading respects every reserve.
        assert!(!budget.charge().grow(MIB));
        drop(held);
        assert!(budget.charge().grow(MIB));
    }

    #[test]
    fn a_closed_account_leaves_no_reserve_behind() {
        let budget = MemoryBudget::new(300 * MIB);
        let only = budget.open_account();
        let gone = budget.open_account();
        drop(gone);
        let mut call = only.charge();
        assert!(call.grow(300 * MIB));
    }
}
