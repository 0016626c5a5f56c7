//! Two versions of a plugin, one input: what a candidate would decide
//! differently from the version serving. Plugins are functions of what the
//! host hands them (objects, clock, cluster, seeded randomness), so both
//! can be given exactly the same and their answers compared field by field
//! before the candidate acts. `reconciler-host plan` runs this over every
//! primary of a cluster; `test --against` over golden cases.

pub mod both_versions;
pub mod compare;
pub mod golden_cases;
pub mod live_objects;
pub mod report;

pub use both_versions::{PrimaryPlan, Snapshot, plan};
pub use compare::{Decision, Difference, compare};
