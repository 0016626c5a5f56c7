//! What the API server does with an object before storing it, beyond its
//! own fields: the depth it can be read back at, one controller reference
//! at most, a custom resource's schema, and for a CRD the scope and schemas
//! it declares.
//!
//! Why apart from the writes: every write admits the same way, and the CRD
//! schemas it consults are learned here too, once a CRD is stored.

use reconciler_contract::json_depth::{unreadable_at, value_depth};
use serde_json::Value;

use super::errors::{StoreError, invalid};
use super::state::EmbeddedStore;
use super::validation::check_single_controller;
use crate::cluster::backend::ObjectKey;
use crate::cluster::embedded::crd_schema::{self, CrdVersions};
use crate::cluster::embedded::kind_scopes::{CrdScope, is_crd};

impl EmbeddedStore {
    /// What the API server does with an object before storing it, beyond
    /// its own fields: one controller reference at most; a custom resource
    /// pruned, defaulted and validated by its CRD's schema; for a CRD a
    /// scope that is valid and unchanged and schemas that compile (returned,
    /// to learn once stored).
    pub(super) fn admit(
        &self,
        key: &ObjectKey,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<Option<LearnedCrd>, StoreError> {
        check_depth(key, object)?;
        check_single_controller(object).map_err(|message| invalid(key, &message))?;
        self.admit_custom(key, object, old, crd_schema::admit)?;
        if !is_crd(&key.kind) {
            return Ok(None);
        }
        let crd = CrdScope::of(object).map_err(|message| invalid(key, &message))?;
        self.scopes
            .check(&crd)
            .map_err(|message| invalid(key, &message))?;
        let versions = CrdVersions::of(object, &crd.group, &crd.kind)
            .map_err(|message| invalid(key, &message))?;
        Ok(Some((crd, versions)))
    }

    /// The schema's part of [`Self::admit`], for kinds a stored CRD
    /// describes: `admission` is [`crd_schema::admit`], or
    /// [`crd_schema::admit_status`] for a write of the status.
    pub(super) fn admit_custom(
        &self,
        key: &ObjectKey,
        object: &mut Value,
        old: Option<&Value>,
        admission: SchemaAdmission,
    ) -> Result<(), StoreError> {
        let Some(schema) = self.schemas.of(&key.kind) else {
            return Ok(());
        };
        let pruned = admission(&schema, object, old).map_err(|message| invalid(key, &message))?;
        if !pruned.is_empty() {
            tracing::info!(
                object = %key,
                fields = %pruned.join(", "),
                "fields the CustomResourceDefinition does not declare were pruned, as the API server prunes them"
            );
        }
        Ok(())
    }

    /// Refuses an apply whose fields the kind's schema does not accept, as
    /// the API server refuses it before merging.
    pub(super) fn check_applied(&self, key: &ObjectKey, applied: &Value) -> Result<(), StoreError> {
        let Some(schema) = self.schemas.of(&key.kind) else {
            return Ok(());
        };
        let what = format!(
            "{}/{}; {}, Kind={}",
            key.namespace.as_deref().unwrap_or(""),
            key.name,
            key.kind.api_version(),
            key.kind.kind
        );
        crd_schema::check_applied(&schema, &what, applied).map_err(|message| invalid(key, &message))
    }

    /// Remembers what a CRD just stored says about its kind.
    pub(super) fn learn(&mut self, crd: Option<LearnedCrd>) {
        if let Some((scope, versions)) = crd {
            self.scopes.learn(scope);
            self.schemas.learn(versions);
        }
    }
}

/// A CRD's scope and schemas, checked, to learn once it is stored.
pub(super) type LearnedCrd = (CrdScope, CrdVersions);

/// How a write of a custom resource is pruned, defaulted and validated.
type SchemaAdmission =
    fn(&crd_schema::Schema, &mut Value, Option<&Value>) -> Result<Vec<String>, String>;

/// Refuses an object nested deeper than its JSON text could be read back
/// (the store keeps text, see [`super::entry::Entry`]).
pub(super) fn check_depth(key: &ObjectKey, object: &Value) -> Result<(), StoreError> {
    match unreadable_at(value_depth(object)) {
        Some(why) => Err(invalid(key, &why)),
        None => Ok(()),
    }
}
