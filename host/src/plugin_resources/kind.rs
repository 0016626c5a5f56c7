//! The Plugin resource's group, version and kind, apart from everything
//! that uses them: the followers watch it, `dev` and `simulate` read it
//! from object files, and `rbac` grants access to it.

use kube::api::{ApiResource, GroupVersionKind};

pub const GROUP: &str = "reconciler-host.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "Plugin";

/// The Plugin kind, for the dynamic API.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), "plugins")
}
