//! Keeps the fleet equal to the union of what the sources name: a new
//! member is engaged, one whose kubeconfig changed is engaged anew, one no
//! source names any more is disengaged, and each of these (and every
//! refusal) is said in the log and on the member's Secret.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;

use super::announcer::Announcer;
use super::client::{EngageError, client_for};
use super::described::{Described, SourceKind};
use super::options::SourceOptions;
use super::probe::probe_of;
use super::union::{Clash, union};
use crate::cluster::kubernetes::KubernetesBackend;
use crate::fleet::Fleet;
use crate::fleet::member::{Announce, Hooks, Identity};

/// Where engagements go and how they are made: the fleet, the host's own
/// client (the `local` member's), the sources' options, and where each
/// engagement is said.
pub(super) struct Engaging<'a> {
    pub fleet: &'a Fleet<KubernetesBackend>,
    pub local: &'a kube::Client,
    pub options: &'a SourceOptions,
    pub announcer: &'a Announcer,
}

/// What a member was engaged from: its source, kubeconfig, identity and
/// Secret.
type EngagedFrom = (
    SourceKind,
    Option<String>,
    Identity,
    Option<ObjectReference>,
);

/// The members each source names, and what the fleet was given for each.
#[derive(Default)]
pub(super) struct Engagements {
    by_source: BTreeMap<SourceKind, Vec<Described>>,
    /// Engaged (or refused) members: the source and kubeconfig they were
    /// engaged from, so only a change engages again.
    engaged: BTreeMap<String, EngagedFrom>,
    /// Name clashes already reported: the losing source's description of
    /// the name and the source that kept it.
    clashes: BTreeMap<(String, String), String>,
}

impl Engagements {
    pub(super) fn report(&mut self, kind: SourceKind, mut members: Vec<Described>) {
        members.sort_by(|a, b| a.order.cmp(&b.order));
        self.by_source.insert(kind, members);
    }

    /// Says each claim on a name that [`union`] refused, once while it
    /// lasts: in the log, and on its Secret.
    fn report_clashes(&mut self, clashes: Vec<Clash>, announcer: &Announcer) {
        let mut now = BTreeMap::new();
        for clash in clashes {
            let name = &clash.refused.identity.name;
            let key = (name.clone(), clash.refused.identity.source.clone());
            if self.clashes.get(&key) != Some(&clash.kept_by) {
                let note = format!(
                    "cluster {name} is already given by {}: {} is not used for it; rename one of them",
                    clash.kept_by, clash.refused.identity.source
                );
                tracing::warn!(cluster = %name, "{note}");
                announcer.announce(clash.refused.secret.as_ref(), true, "NameTaken", note);
            }
            now.insert(key, clash.kept_by);
        }
        self.clashes = now;
    }

    /// Brings the fleet in line with the union of the sources' reports.
    pub(super) async fn apply(&mut self, to: &Engaging<'_>) {
        let (union, clashes) = union(&self.by_source);
        self.report_clashes(clashes, to.announcer);
        let gone: Vec<String> = self
            .engaged
            .keys()
            .filter(|name| !union.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            self.disengage(&name, to).await;
        }
        for (name, (kind, described)) in union {
            let unchanged = self
                .engaged
                .get(&name)
                .is_some_and(|(k, config, identity, _)| {
                    *k == kind && *config == described.kubeconfig && *identity == described.identity
                });
            if unchanged {
                continue;
            }
            self.engaged.insert(
                name.clone(),
                (
                    kind,
                    described.kubeconfig.clone(),
                    described.identity.clone(),
                    described.secret.clone(),
                ),
            );
            engage(to, &name, kind, described).await;
        }
    }

    /// Stops serving a member no source names any more.
    async fn disengage(&mut self, name: &str, to: &Engaging<'_>) {
        let secret = self
            .engaged
            .remove(name)
            .and_then(|(_, _, _, secret)| secret);
        to.fleet.disengage(name, to.options.drain).await;
        to.announcer.announce(
            secret.as_ref(),
            false,
            "Disengaged",
            format!("cluster {name} is no longer served: its source no longer names it"),
        );
    }
}

/// Engages `described` as member `name` (anew if it serves already), or
/// says why its kubeconfig gives no client.
async fn engage(to: &Engaging<'_>, name: &str, kind: SourceKind, described: Described) {
    let client = match &described.kubeconfig {
        None => Ok((to.local.clone(), described.identity.server.clone())),
        Some(text) => {
            client_for(
                text,
                &kind.trust(&to.options.secrets_allow),
                to.options.request_timeout,
                to.options.member_rate,
            )
            .await
        }
    };
    match client {
        Ok((client, server)) => engaged(to, name, described, client, server),
        Err(why) => refused(to, name, &described, why),
    }
}

/// Serves the member with its new client, and says so on its Secret.
fn engaged(
    to: &Engaging<'_>,
    name: &str,
    described: Described,
    client: kube::Client,
    server: String,
) {
    let announcer = to.announcer;
    let again = to.fleet.identities().contains_key(name);
    let identity = Identity {
        server: server.clone(),
        ..described.identity
    };
    let backend =
        Arc::new(KubernetesBackend::new(client.clone()).with_fence(to.options.fence.clone()));
    let probe = probe_of(client, announcer.clone(), described.secret.clone(), name);
    let announce: Announce = {
        let (announcer, secret) = (announcer.clone(), described.secret.clone());
        Arc::new(move |warning, reason, note| {
            announcer.announce(secret.as_ref(), warning, reason, note)
        })
    };
    let hooks = Hooks {
        probe: Some(probe),
        announce: Some(announce),
    };
    to.fleet.engage(identity, backend, hooks, to.options.drain);
    let (reason, what) = if again {
        ("Reengaged", "engaged anew, its kubeconfig changed")
    } else {
        ("Engaged", "engaged")
    };
    announcer.announce(
        described.secret.as_ref(),
        false,
        reason,
        format!("cluster {name} {what}: {server}"),
    );
}

/// Says why the member's kubeconfig gives no client. A member already
/// serving keeps its previous client: a broken rotation must not stop a
/// working cluster.
fn refused(to: &Engaging<'_>, name: &str, described: &Described, why: EngageError) {
    let serving = to.fleet.identities().contains_key(name);
    let reason = match why {
        EngageError::Refused(_) => "Refused",
        EngageError::NoClient(_) => "EngageFailed",
    };
    to.announcer.announce(
        described.secret.as_ref(),
        true,
        reason,
        format!("cannot engage cluster {name}: {why}"),
    );
    tracing::warn!(
        cluster = %name,
        source = %described.identity.source,
        "cannot engage cluster {name} from {}: {why}{}",
        described.identity.source,
        if serving { "; it keeps serving with its previous kubeconfig" } else { "" }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, source: &str, order: &str) -> Described {
        Described {
            identity: Identity {
                name: name.into(),
                labels: BTreeMap::new(),
                source: source.into(),
                server: String::new(),
            },
            kubeconfig: Some(format!("config of {source}")),
            secret: None,
            order: order.into(),
        }
    }

    #[test]
    fn the_operators_sources_keep_a_name_a_secret_also_gives() {
        let mut engagements = Engagements::default();
        // Reported in any order, Secrets first.
        engagements.report(
            SourceKind::Secrets,
            vec![
                member("prod", "secret takeover", "2026-02-01T00:00:00Z takeover"),
                member("local", "secret local", "2026-01-01T00:00:00Z local"),
                member("east", "secret east-new", "2026-03-01T00:00:00Z east-new"),
                member("east", "secret east", "2026-01-01T00:00:00Z east"),
            ],
        );
        engagements.report(
            SourceKind::ClusterApi,
            vec![member("prod", "secret prod-kubeconfig", "x")],
        );
        engagements.report(
            SourceKind::Files,
            vec![member("prod", "file prod.yaml", "prod.yaml")],
        );
        engagements.report(SourceKind::Local, vec![member("local", "local", "")]);
        let (union, clashes) = union(&engagements.by_source);
        let kept: Vec<(&str, &str)> = union
            .iter()
            .map(|(name, (_, d))| (name.as_str(), d.identity.source.as_str()))
            .collect();
        assert_eq!(
            kept,
            [
                ("east", "secret east"),
                ("local", "local"),
                ("prod", "file prod.yaml"),
            ]
        );
        let refused: Vec<(&str, &str)> = clashes
            .iter()
            .map(|c| (c.refused.identity.source.as_str(), c.kept_by.as_str()))
            .collect();
        assert_eq!(
            refused,
            [
                ("secret prod-kubeconfig", "file prod.yaml"),
                ("secret local", "local"),
                ("secret takeover", "file prod.yaml"),
                ("secret east-new", "secret east"),
            ]
        );
    }
}
