use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::sandbox_args::SandboxArgs;
use crate::admission::shard_labels;
use crate::admission::webhook_configs::{DEFAULT_WEBHOOK_PREFIX, configuration_name};
use crate::plugin::directory::load_dir;
use crate::process::leader_election::DEFAULT_LEASE_NAME;
use crate::process::rbac::{FenceScope, Plurals, RbacScope, fence, rbac};

#[derive(Debug, Args)]
pub struct RbacArgs {
    /// Directory of compiled plugins (*.wasm) the role is for.
    #[arg(long, default_value = "plugins", value_name = "DIR")]
    pub plugins_dir: PathBuf,
    /// CRD manifests to take the resource names (plurals) and scopes of custom kinds from;
    /// without them a custom kind's plural is guessed the way the API server guesses
    /// (Website -> websites) and, with --namespace, it is granted cluster-wide.
    #[arg(long, value_name = "DIR")]
    pub crds: Option<PathBuf>,
    /// The name of the ClusterRole, and of the Roles and RoleBindings.
    #[arg(long, default_value = "reconciler-host")]
    pub name: String,
    /// A namespace the host serves, as `run --namespace` (repeatable): namespaced kinds are
    /// then granted by a Role and RoleBinding in each, and the ClusterRole keeps only what is
    /// cluster-wide. Without it, everything is one ClusterRole.
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Vec<String>,
    /// The host's service account, which the RoleBindings name.
    #[arg(long, default_value = "reconciler-host", value_name = "NAME")]
    pub service_account: String,
    /// The namespace of the host's service account.
    #[arg(long, default_value = "reconciler-host", value_name = "NAMESPACE")]
    pub service_account_namespace: String,
    /// Where the leader-election Lease lives, as `run --leader-election-namespace`: it is
    /// granted by a Role there [default: the service account's namespace]. With --sharding or
    /// --write-fence, also the ring's, as `run --sharding-namespace`.
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// The name of the Lease, as `run --leader-election-id`: the only Lease the host may read
    /// and renew. With --sharding or --write-fence, also the ring's name, as `run --sharding-id`.
    #[arg(long, default_value = DEFAULT_LEASE_NAME, value_name = "NAME")]
    pub leader_election_id: String,
    /// Also grant what `run --sharding` needs: get, list, patch, update and delete on every Lease
    /// in the Lease's namespace (each replica's Lease is named after its pod), and, for admission,
    /// the MutatingWebhookConfiguration <PREFIX>.shard-labels that labels new primaries with their
    /// shard, with the certificate's Secret.
    #[arg(long)]
    pub sharding: bool,
    /// Also grant what `run --install-crds` needs (get, create and patch
    /// CustomResourceDefinitions).
    #[arg(long)]
    pub install_crds: bool,
    /// Leave out what watching Plugin resources needs (as `run --no-plugin-resources`): get, list,
    /// watch on plugins.reconciler-host.io and patch on their status, and get on Secrets and
    /// ConfigMaps (keys, pull secrets) in the service account's namespace.
    #[arg(long)]
    pub no_plugin_resources: bool,
    /// Grant what following member clusters' kubeconfig Secrets needs (as `run
    /// --cluster-secrets` or --cluster-api): get, list, watch on Secrets in the service
    /// account's namespace.
    #[arg(long)]
    pub cluster_secrets: bool,
    /// No longer needed: Secrets are granted only with --cluster-secrets.
    #[arg(long, hide = true)]
    pub no_cluster_secrets: bool,
    /// Where `run` keeps the generated admission certificate (the namespace of
    /// --admission-cert-secret), granted when a plugin serves admission
    /// [default: the service account's namespace].
    #[arg(long, value_name = "NAMESPACE")]
    pub admission_secret_namespace: Option<String>,
    /// As `run --admission-webhook-prefix`: the webhook configurations the host may change are
    /// <PREFIX>-<plugin> for the plugins that serve admission.
    #[arg(long, default_value = DEFAULT_WEBHOOK_PREFIX, value_name = "PREFIX")]
    pub admission_webhook_prefix: String,
    /// What a member cluster (run --clusters-dir, kubeconfig Secrets, --cluster-api) must grant
    /// the user of its kubeconfig: the plugins' kinds and Events, nothing of the hub's (the
    /// Lease, admission, Plugin resources, member Secrets, token reviews).
    #[arg(long)]
    pub member: bool,
    /// A read-only role for `reconciler-host plan` against this cluster: get, list and watch on
    /// the plugins' kinds, nothing else (no writes, Events, Lease or admission). Bind it to the
    /// identity your CI plans with; the RoleBindings (with --namespace) name --service-account.
    #[arg(long, conflicts_with_all = ["member", "sharding", "install_crds", "cluster_secrets"])]
    pub plan: bool,
    /// Print the shard fence instead of the role: a ValidatingAdmissionPolicy and its binding
    /// with which the API server refuses a write by the host to an object of a shard bucket
    /// unless the ring the replicas publish names the writer for it, so a replica frozen past
    /// its Lease (SIGSTOP, a long pause) lands nothing once thawed. The ring is published (as
    /// the ConfigMap <--leader-election-id>-writers in --leader-election-namespace, which `rbac
    /// --sharding` grants) by `run --sharding`; until it is first published, writes are let
    /// through (the host's own check before each write still holds). Each replica is told apart by its user
    /// and, with tokens bound to pods (as the kubelet mounts them), its pod. It does not depend
    /// on the plugins.
    #[arg(long, conflicts_with_all = ["member", "plan"])]
    pub write_fence: bool,
    /// A user the host writes as, whose writes the fence checks (repeatable)
    /// [default: the service account, system:serviceaccount:<NAMESPACE>:<NAME>].
    #[arg(long, value_name = "USER", requires = "write_fence")]
    pub write_fence_user: Vec<String>,
    /// The admissionregistration.k8s.io version of the fence: v1 (Kubernetes 1.30 and later), or
    /// v1beta1 on 1.28 and 1.29 with the ValidatingAdmissionPolicy feature gate and that API
    /// enabled.
    #[arg(long, value_name = "VERSION", default_value = "v1", value_parser = ["v1", "v1beta1"], requires = "write_fence")]
    pub write_fence_api_version: String,
}

pub fn run(sandbox: &SandboxArgs, args: RbacArgs) -> anyhow::Result<ExitCode> {
    if args.write_fence {
        print!("{}", fence(&fence_scope(args)));
        return Ok(ExitCode::SUCCESS);
    }
    let sandbox = sandbox.sandbox()?;
    let (plugins, failed) = load_dir(&sandbox, &args.plugins_dir)
        .with_context(|| format!("reading {}", args.plugins_dir.display()))?;
    if let Some(error) = failed.first() {
        // A role missing a plugin's rules would fail later, in the cluster.
        anyhow::bail!("{error} (a role is only generated when every plugin loads)");
    }
    let plurals = match &args.crds {
        Some(dir) => Plurals::from_crds(dir)?,
        None => Plurals::default(),
    };
    let metadata: Vec<_> = plugins.iter().map(|p| p.metadata().clone()).collect();
    let admission: Vec<&str> = plugins
        .iter()
        .filter(|p| p.admission().is_some())
        .map(|p| p.name())
        .collect();
    print!("{}", rbac(&metadata, &plurals, &scope_of(args, &admission)));
    Ok(ExitCode::SUCCESS)
}

/// What the fence is for: the host's users, the ring's namespace and name.
fn fence_scope(args: RbacArgs) -> FenceScope {
    let users = if args.write_fence_user.is_empty() {
        vec![format!(
            "system:serviceaccount:{}:{}",
            args.service_account_namespace, args.service_account
        )]
    } else {
        args.write_fence_user
    };
    FenceScope {
        prefix: args.admission_webhook_prefix,
        api_version: args.write_fence_api_version,
        users,
        namespace: args
            .leader_election_namespace
            .unwrap_or(args.service_account_namespace),
        ring: args.leader_election_id,
    }
}

/// The scope of the role; `admission`: the plugins that serve admission.
fn scope_of(args: RbacArgs, admission: &[&str]) -> RbacScope {
    let mut webhook_configurations: BTreeSet<String> = admission
        .iter()
        .map(|plugin| configuration_name(&args.admission_webhook_prefix, plugin))
        .collect();
    if args.sharding {
        // With admission served, new primaries are labelled at creation.
        webhook_configurations.insert(shard_labels::configuration_name(
            &args.admission_webhook_prefix,
        ));
    }
    let admission_secret_namespace = (!webhook_configurations.is_empty()).then(|| {
        args.admission_secret_namespace
            .clone()
            .unwrap_or_else(|| args.service_account_namespace.clone())
    });
    let (member, plan) = (args.member, args.plan);
    let scope = RbacScope {
        admission_secret_namespace,
        webhook_configurations,
        lease_name: args.leader_election_id,
        sharding: args.sharding,
        name: args.name,
        namespaces: args.namespace.into_iter().collect::<BTreeSet<_>>(),
        lease_namespace: args
            .leader_election_namespace
            .unwrap_or_else(|| args.service_account_namespace.clone()),
        service_account: args.service_account,
        service_account_namespace: args.service_account_namespace,
        install_crds: args.install_crds,
        plugin_resources: !args.no_plugin_resources,
        cluster_secrets: args.cluster_secrets,
        member: false,
        plan: false,
    };
    if plan {
        scope.plan()
    } else if member {
        scope.member()
    } else {
        scope
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn rbac_args(extra: &[&str]) -> Result<RbacArgs, clap::Error> {
        let cli = Cli::try_parse_from(["reconciler-host", "rbac"].iter().chain(extra))?;
        match cli.command {
            Command::Rbac(args) => Ok(args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn namespaces_and_the_service_account_come_from_flags() {
        let scope = scope_of(rbac_args(&["-n", "b", "--namespace", "a"]).unwrap(), &[]);
        assert_eq!(scope.admission_secret_namespace, None);
        assert_eq!(scope.namespaces, BTreeSet::from(["a".into(), "b".into()]));
        assert_eq!(
            (
                scope.service_account.as_str(),
                scope.service_account_namespace.as_str(),
                scope.lease_namespace.as_str()
            ),
            ("reconciler-host", "reconciler-host", "reconciler-host")
        );
        let scope = scope_of(
            rbac_args(&[
                "-n",
                "a",
                "--service-account-namespace",
                "ops",
                "--leader-election-namespace",
                "leases",
            ])
            .unwrap(),
            &["guard"],
        );
        assert_eq!(
            scope.admission_secret_namespace.as_deref(),
            Some("ops"),
            "the certificate Secret defaults to the service account's namespace"
        );
        assert_eq!(
            (
                scope.service_account_namespace.as_str(),
                scope.lease_namespace.as_str()
            ),
            ("ops", "leases")
        );
        assert_eq!(
            scope.webhook_configurations,
            BTreeSet::from(["reconciler-host-guard".to_string()])
        );
        let scope = scope_of(
            rbac_args(&[
                "--leader-election-namespace",
                "x",
                "--leader-election-id",
                "mine",
                "--admission-webhook-prefix",
                "team",
            ])
            .unwrap(),
            &["guard"],
        );
        assert_eq!(
            (scope.lease_namespace.as_str(), scope.lease_name.as_str()),
            ("x", "mine"),
            "the Lease is named and placed without --namespace too"
        );
        assert_eq!(
            scope.webhook_configurations,
            BTreeSet::from(["team-guard".to_string()])
        );
    }
}
