//! The objects a plan reads from a live cluster: every object of the
//! kinds the two versions reconcile, own and read, listed once (get, list
//! and nothing else, so a read-only identity is enough: `rbac --plan`).

use std::collections::BTreeSet;

use anyhow::Context as _;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams};
use reconciler_contract::{KindRef, PluginMetadata};
use serde_json::Value;

/// Objects listed per request: the API server's pages, followed to the end.
const PAGE: u32 = 500;

/// Every kind either version declares: primary, owned, read.
pub fn kinds_of(versions: &[&PluginMetadata]) -> BTreeSet<KindRef> {
    versions
        .iter()
        .flat_map(|m| {
            std::iter::once(m.primary.clone())
                .chain(m.owns.iter().cloned())
                .chain(m.reads.iter().map(|r| r.kind.clone()))
        })
        .collect()
}

/// All objects of `kinds` in every namespace, each with its apiVersion and
/// kind (a list's items come without them).
///
/// With `namespaces`, namespaced kinds are listed in those only (what a
/// role bound in them allows); cluster-scoped kinds are listed whole.
pub async fn list_all(
    client: &kube::Client,
    kinds: &BTreeSet<KindRef>,
    namespaces: &[String],
) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    for kind in kinds {
        let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .with_context(|| {
                format!(
                    "the cluster does not serve {} {}",
                    kind.api_version(),
                    kind.kind
                )
            })?;
        let apis: Vec<Api<DynamicObject>> =
            if namespaces.is_empty() || caps.scope == kube::discovery::Scope::Cluster {
                vec![Api::all_with(client.clone(), &resource)]
            } else {
                namespaces
                    .iter()
                    .map(|ns| Api::namespaced_with(client.clone(), ns, &resource))
                    .collect()
            };
        for api in apis {
            list_pages(&api, kind, &mut objects).await?;
        }
    }
    Ok(objects)
}

async fn list_pages(
    api: &Api<DynamicObject>,
    kind: &KindRef,
    objects: &mut Vec<Value>,
) -> anyhow::Result<()> {
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .with_context(|| format!("listing {} {}", kind.api_version(), kind.kind))?;
        for item in page.items {
            let mut value = serde_json::to_value(item)?;
            value["apiVersion"] = Value::String(kind.api_version());
            value["kind"] = Value::String(kind.kind.clone());
            objects.push(value);
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}
