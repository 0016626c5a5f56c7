//! Following a set of API objects the host takes as input (member
//! kubeconfig Secrets, Plugins) as whole relists and single changes.
//!
//! The fleet's sources and the Plugin followers both need the same thing
//! from the API server: what exists now, then every change, and after any
//! break in the watch a fresh whole list, so that objects deleted while the
//! watch was down are noticed. Written once here, each of them only says
//! what an object means to it. Unlike the engine's watches (`watch.rs`)
//! nothing is cached or resumed: these sets are small and their readers
//! keep what they need.

use std::fmt::Debug;

use futures::StreamExt as _;
use kube::Api;
use kube::Resource;
use kube::runtime::watcher;

use super::watch_backoff::backed_off;
use serde::de::DeserializeOwned;

/// What the watch saw.
#[derive(Debug)]
pub enum Change<K> {
    /// Every object that exists now: after the first list, and after each
    /// relist that followed a break. What is not in it is gone.
    Relisted(Vec<K>),
    /// An object was created or changed.
    Applied(K),
    /// An object was deleted.
    Deleted(K),
}

/// Lists `api`'s objects that `config` selects, then watches them, for as
/// long as the API server answers or the future is not dropped.
///
/// A failed list or watch is retried with a backoff (`watch_backoff.rs`),
/// relisting when the watch cannot resume. `on_error` is told of a failure
/// unless the one just before it failed too: a watch that keeps failing to
/// restart is told once, while each relist starts afresh and tells its own
/// failure. The caller says it in its own words. `on_change` is given every
/// relist and change, in order.
pub async fn relist_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    mut on_error: impl FnMut(&watcher::Error),
    mut on_change: impl FnMut(Change<K>),
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let stream = backed_off(watcher(api, config));
    tokio::pin!(stream);
    let mut warned = false;
    let mut relist: Option<Vec<K>> = None;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => {
                warned = false;
                event
            }
            Err(e) => {
                if !warned {
                    on_error(&e);
                    warned = true;
                }
                continue;
            }
        };
        match event {
            watcher::Event::Init => relist = Some(Vec::new()),
            watcher::Event::InitApply(object) => {
                if let Some(relist) = &mut relist {
                    relist.push(object);
                }
            }
            watcher::Event::InitDone => {
                if let Some(objects) = relist.take() {
                    on_change(Change::Relisted(objects));
                }
            }
            watcher::Event::Apply(object) => on_change(Change::Applied(object)),
            watcher::Event::Delete(object) => on_change(Change::Deleted(object)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use http::{Request, Response};
    use k8s_openapi::api::core::v1::Secret;
    use kube::client::Body;
    use serde_json::{Value, json};

    use super::*;
    use crate::cluster::kubernetes::testing::{Handle, failure, next_raw, respond};

    fn secret(name: &str, rv: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "hub", "resourceVersion": rv},
        })
    }

    fn list(rv: &str, items: &[Value]) -> Value {
        json!({
            "apiVersion": "v1", "kind": "SecretList",
            "metadata": {"resourceVersion": rv}, "items": items,
        })
    }

    async fn watch_events(api: &mut Handle, events: &[(&str, Value)]) {
        let body: String = events
            .iter()
            .map(|(kind, object)| format!("{}\n", json!({"type": kind, "object": object})))
            .collect();
        next_raw(api, |_| (200, body)).await;
    }

    fn name_of(secret: &Secret) -> String {
        secret.metadata.name.clone().unwrap_or_default()
    }

    /// Each change as text: `relisted a b`, `applied c`, `deleted a`.
    fn text(change: &Change<Secret>) -> String {
        match change {
            Change::Relisted(all) => {
                let names: Vec<String> = all.iter().map(name_of).collect();
                format!("relisted {}", names.join(" "))
            }
            Change::Applied(s) => format!("applied {}", name_of(s)),
            Change::Deleted(s) => format!("deleted {}", name_of(s)),
        }
    }

    /// Follows Secrets on a mocked API until `want` changes were seen.
    async fn follow<S>(script: impl FnOnce(Handle) -> S, want: usize) -> (Vec<String>, usize)
    where
        S: Future<Output = ()> + Send + 'static,
    {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<Secret> = Api::namespaced(kube::Client::new(service, "hub"), "hub");
        let server = tokio::spawn(script(handle));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(0));
        let following = {
            let (seen, errors) = (seen.clone(), errors.clone());
            relist_watch(
                api,
                watcher::Config::default(),
                move |_| *errors.lock().unwrap() += 1,
                move |change| seen.lock().unwrap().push(text(&change)),
            )
        };
        let enough = async {
            while seen.lock().unwrap().len() < want {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            () = following => panic!("the watch ended"),
            () = enough => {}
            () = tokio::time::sleep(Duration::from_secs(20)) => panic!("too few changes"),
        }
        server.abort();
        let seen = seen.lock().unwrap().clone();
        let errors = *errors.lock().unwrap();
        (seen, errors)
    }

    #[tokio::test]
    async fn a_whole_list_comes_first_then_each_change() {
        let (seen, errors) = follow(
            |mut api| async move {
                let items = [secret("a", "1"), secret("b", "2")];
                respond(&mut api, 200, list("2", &items)).await;
                watch_events(
                    &mut api,
                    &[("ADDED", secret("c", "3")), ("DELETED", secret("a", "4"))],
                )
                .await;
                std::future::pending::<()>().await;
            },
            3,
        )
        .await;
        assert_eq!(seen, ["relisted a b", "applied c", "deleted a"]);
        assert_eq!(errors, 0);
    }

    #[tokio::test]
    async fn failures_in_a_row_are_told_once() {
        let (seen, errors) = follow(
            |mut api| async move {
                respond(&mut api, 200, list("1", &[secret("a", "1")])).await;
                for _ in 0..2 {
                    respond(&mut api, 403, failure(403, "Forbidden", "no")).await;
                }
                watch_events(&mut api, &[("ADDED", secret("b", "2"))]).await;
                std::future::pending::<()>().await;
            },
            2,
        )
        .await;
        assert_eq!(seen, ["relisted a", "applied b"]);
        assert_eq!(errors, 1, "two failed watches in a row are told once");
    }

    #[tokio::test]
    async fn each_relist_that_fails_is_told() {
        // Every relist starts afresh (the watcher's Init), so a list that
        // keeps failing is told at each attempt.
        let (seen, errors) = follow(
            |mut api| async move {
                for _ in 0..2 {
                    respond(&mut api, 403, failure(403, "Forbidden", "no")).await;
                }
                respond(&mut api, 200, list("5", &[secret("b", "5")])).await;
                std::future::pending::<()>().await;
            },
            1,
        )
        .await;
        assert_eq!(seen, ["relisted b"]);
        assert_eq!(errors, 2);
    }
}
