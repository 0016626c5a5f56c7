//! Reconcile work spread over replicas (`run --sharding`), never two
//! writers of one object.
//!
//! Each live replica is a member of a ring; every primary object (or, for
//! small member clusters, every cluster) has exactly one owner among them,
//! chosen by weighted rendezvous hashing (`assignment.rs`), so a replica
//! joining or leaving moves only its share of the keys.

pub mod assignment;
pub mod coordinator;
pub mod fence;
pub mod handover;
pub mod lease_sightings;
pub mod membership;
