//! `test --against OLD`: each reconcile case's input given to the serving
//! version and to the candidate, and their decisions compared
//! (`decision_diff`) instead of checked against the case's `expect`. A
//! case's objects, clock and cluster are the same for both, and so are
//! their random numbers (the candidate draws the serving version's).

use std::path::Path;

use super::compare::{Decision, Difference, compare};
use crate::golden::runner::{case_now, expectation_of, load_case, reconcile_input};
use crate::plugin::LoadedPlugin;

/// What comparing one case file came to.
#[derive(Debug)]
pub enum Compared {
    Same,
    Differs(Vec<Difference>),
    /// A change or admission case: only reconcile cases are compared.
    NotAReconcileCase,
    /// The case file itself is wrong.
    Broken(String),
}

/// The case's description and how the two versions compare on it.
pub fn compare_case(
    candidate: &LoadedPlugin,
    serving: &LoadedPlugin,
    file: &Path,
) -> (Option<String>, Compared) {
    let case = match load_case(file) {
        Ok(case) => case,
        Err(why) => return (None, Compared::Broken(why)),
    };
    let description = case.description.clone();
    let Some(primary) = case.primary.clone() else {
        return (description, Compared::NotAReconcileCase);
    };
    let now_millis = match case_now(&case) {
        Ok(now) => now,
        Err(why) => return (description, Compared::Broken(why)),
    };
    let decide = |plugin: &LoadedPlugin| -> Result<Decision, String> {
        let input = reconcile_input(plugin, &case, primary.clone(), now_millis)?;
        Ok(plugin
            .reconcile(input)
            .map(expectation_of)
            .map_err(|e| e.to_string()))
    };
    let (old, new) = match (decide(serving), decide(candidate)) {
        (Ok(old), Ok(new)) => (old, new),
        (Err(why), _) | (_, Err(why)) => return (description, Compared::Broken(why)),
    };
    let differences = compare(&old, &new);
    let compared = if differences.is_empty() {
        Compared::Same
    } else {
        Compared::Differs(differences)
    };
    (description, compared)
}
