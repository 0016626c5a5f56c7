//! Reading a plugin's `triggers` export at load (0.2.3): which changes of
//! which kinds wake its primaries. A plugin without the export (built
//! before 0.2.3, or declaring none) is woken by every change.

use reconciler_contract::{Change, KindTrigger};

use super::bindings::{PluginPre, kind_from_wit, triggers as wit};
use super::call_state::CallState;
use super::errors::CallError;
use super::loaded::{Call, LoadedPlugin, call_fresh};

impl LoadedPlugin {
    /// Calls `triggers` in a fresh instance, like `metadata`: nothing for a
    /// plugin that does not export the interface.
    pub(super) fn call_triggers(
        pre: &PluginPre<CallState>,
        call: Call<'_>,
    ) -> Result<Vec<KindTrigger>, CallError> {
        if !pre.exports_triggers() {
            return Ok(Vec::new());
        }
        call_fresh(pre, call, |p, store| match p.triggers() {
            Some(t) => t.call_triggers(store),
            None => Ok(Vec::new()),
        })
        .map(|triggers| triggers.into_iter().map(trigger_from_wit).collect())
    }
}

fn trigger_from_wit(t: wit::KindTrigger) -> KindTrigger {
    KindTrigger {
        kind: kind_from_wit(t.kind),
        wake_on: t
            .wake_on
            .into_iter()
            .map(|change| match change {
                wit::Change::Any => Change::Any,
                wit::Change::Generation => Change::Generation,
                wit::Change::Labels => Change::Labels,
                wit::Change::Annotations => Change::Annotations,
                wit::Change::Fields(paths) => Change::Fields(paths),
            })
            .collect(),
    }
}
