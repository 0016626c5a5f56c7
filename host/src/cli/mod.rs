//! The `reconciler-host` command line.

mod builtins_args;
mod cluster_args;
mod dev_cmd;
mod embedded_clusters_args;
mod explain_cmd;
mod inspect_cmd;
mod journal_args;
mod listen;
mod metrics_args;
mod new_cmd;
mod plan_cmd;
mod push_cmd;
mod rbac_cmd;
mod record_args;
mod registry_args;
mod run_cmd;
mod sandbox_args;
mod simulate_cmd;
mod test_cmd;

use clap::{Parser, Subcommand};

pub use sandbox_args::SandboxArgs;

#[derive(Debug, Parser)]
#[command(
    name = "reconciler-host",
    version,
    about = "A Kubernetes controller host whose reconcile decisions run as sandboxed WebAssembly plugins.",
    long_about = "A Kubernetes controller host whose reconcile decisions run as sandboxed WebAssembly plugins.\n\n\
The host owns watches, caches and apply logic; each plugin (a component built for wasm32-wasip2 \
against wit/reconciler.wit) decides the desired state of one kind.",
    after_help = "Examples:\n  \
reconciler-host dev\n  \
reconciler-host run --plugins-dir plugins --install-crds crds\n  \
reconciler-host simulate --objects examples/ --advance 1h\n  \
reconciler-host test plugins/podset.wasm plugins/podset/cases\n  \
reconciler-host inspect plugins/podset.wasm\n\n\
Writing a plugin (docs/writing-plugins.md, and docs/plugins-<language>.md):\n  \
reconciler-host new NAME --lang rust|python|js --kind GROUP/VERSION/KIND   a project that builds and passes its cases\n  \
Rust        a cdylib crate depending on plugins/sdk (reconciler-sdk): implement Reconciler, export_plugin!;\n              \
add it to the workspace's members, then scripts/build-plugins\n  \
Python      plugins/<name>/app.py with sdk-python (reconciler_sdk); scripts/build-plugins runs componentize-py\n  \
JavaScript  plugins/<name>/<name>.js with sdk-js; scripts/build-plugins runs componentize-js\n\
Then: reconciler-host test <plugin.wasm> <cases>, and reconciler-host dev.\n\n\
-h shows each command's own options; --help adds the sandbox limits every command takes.\n\
Logs go to stderr; filter them with RUST_LOG (e.g. RUST_LOG=debug)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// How logs (stderr) are written: `text` for people, `json` (one object a line, with the
    /// reconcile's plugin, kind, namespace and name) for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Sends traces to this OpenTelemetry collector, by OTLP over HTTP (protobuf): its base
    /// URL (e.g. http://127.0.0.1:4318; /v1/traces is added) or its traces URL. One span per
    /// reconcile (plugin, digest, cluster, object, outcome), with the plugin call and each API
    /// request under it. Off unless given or OTEL_EXPORTER_OTLP_ENDPOINT is set.
    #[arg(long, global = true, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The share of reconciles traced, from 0 to 1 (spans under a traced one follow it).
    #[arg(long, global = true, value_name = "RATIO", default_value_t = 1.0)]
    pub otlp_sample_ratio: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every plugin against the embedded cluster on your machine, no Kubernetes needed.
    #[command(
        after_help = "Objects are seeded from --objects (YAML files); creating, changing or removing a file \
there creates, updates or deletes its objects. The CRDs of --crds (crds/ by default, when it exists) are \
applied first, so the cluster knows which custom kinds are cluster-scoped. Each reconcile prints one line; \
the primary objects and their status are shown as a table whenever they change. A plugin that cannot load, \
or that a real cluster would refuse (a namespaced primary owning or writing a cluster-scoped kind), is \
reported with its file and the others keep running. Stop with Ctrl-C."
    )]
    Dev(dev_cmd::DevArgs),
    /// Run plugins as controllers of a Kubernetes cluster (KUBECONFIG or the pod's service account).
    #[command(
        after_help = "Each plugin's kinds are found by discovery and watched once per kind, shared by all \
plugins; a plugin's first reconcile waits until its caches are filled. A plugin whose kinds the cluster does \
not serve yet is reported once and tried again every --kind-retry-secs while the others run. Objects are \
written by server-side apply with the field manager reconciler-host/<plugin>; status goes through the status \
subresource; Events through events.k8s.io. Plugins are hot-reloaded from --plugins-dir.\n\n\
Examples:\n  \
reconciler-host run --install-crds crds\n  \
reconciler-host run -n team-a -n team-b --selector 'podset:tier=prod'\n  \
reconciler-host run --leader-election   (in a Deployment with several replicas)\n\n\
SIGTERM or SIGINT stops it: no new reconciles, the ones in flight finish within --shutdown-timeout-secs. \
With --leader-election it then releases the Lease; losing the Lease stops it at once with a non-zero exit."
    )]
    Run(Box<run_cmd::RunArgs>),
    /// Run plugins against the embedded cluster on a virtual clock and print what happened.
    #[command(
        after_help = "Prints every reconcile, every Event and the resulting objects as YAML. Deterministic: \
the same plugins and input print byte-identical output. Exits non-zero if a plugin never settles, fails to load \
or is refused (e.g. a namespaced primary owning or writing a cluster-scoped kind); the other plugins still run."
    )]
    Simulate(simulate_cmd::SimulateArgs),
    /// What a new version of a plugin would decide differently from the one serving, before it acts.
    Plan(plan_cmd::PlanArgs),
    /// Run golden cases against a compiled plugin: one line per case, a diff on mismatch.
    #[command(after_help = "A case is a YAML file (unknown keys are refused):\n\n  \
description: what it shows          # optional\n  \
now: 2024-01-01T00:00:00Z           # optional: the plugin's clock\n  \
cluster: {name: east, labels: {}}   # optional: the cluster it is told it is in (default local)\n  \
primary: {apiVersion, kind, metadata, spec, ...}   # the object reconciled\n  \
objects: [...]                      # optional: what the cache holds\n  \
expect:                             # a key left out expects nothing\n    \
apply: [...]                      # objects applied, in order\n    \
delete: [{apiVersion, kind, namespace, name}]\n    \
status: {...}\n    \
events: [{type, reason, message}]\n    \
requeueAfter: 1m\n    \
finalized: true\n    \
error: text                       # instead: the call must fail with this text\n\n\
An admission case has `admission: {operation, object, oldObject, userInfo, dryRun}` instead of primary and \
objects, and expects {allowed, message, warnings, patch}. `dev --record DIR` and `run --record DIR` write \
cases of every reconcile. A mismatch prints a unified diff; exits non-zero if any case fails.")]
    Test(test_cmd::TestArgs),
    /// Print the least-privilege ClusterRole (and, with --namespace, Roles) the plugins of a directory need.
    #[command(
        after_help = "Derived from what each plugin declares: get/list/watch on every kind; create/patch/delete \
on owned kinds; patch on written kinds; patch and update on primaries' status; patch on primaries for a \
finalizer; create/patch on events.k8s.io Events; get/create/update/patch on the leader-election Lease.\n\n\
With --namespace (as given to `run`), namespaced kinds, Events and the Lease are granted by a Role and a \
RoleBinding to the host's service account in each namespace; the ClusterRole keeps cluster-scoped kinds, \
kinds of unknown scope and, with --install-crds, CRD installation.\n\n\
Examples:\n  reconciler-host rbac --plugins-dir plugins --crds crds --sharding > deploy/cluster-role.yaml\n  \
reconciler-host rbac --crds crds -n team-a -n team-b | kubectl apply -f -"
    )]
    Rbac(rbac_cmd::RbacArgs),
    /// Print what a compiled plugin declares: kinds, finalizer, hints and the limits it would run under.
    Inspect(inspect_cmd::InspectArgs),
    /// Why a running host (or `dev`) reconciled an object, what it did and how it ended: its last reconciles.
    #[command(
        after_help = "Reads the decision journal at /objects/KIND/NAMESPACE/NAME: by default of a `dev` running here (its --explain-listen), or with --host of a running host's metrics port (`run --metrics-listen`). It keeps each object's last reconciles (--journal-entries, within --journal-max-mib): what queued each (the fields a change changed, old -> new, and who manages them), the reads, what the host did and what the API server did with each write, and the loop it completed, if any. Under sharding, ask the replica that owns the object (/shards names them).\n\n\
Examples:\n  \
reconciler-host explain podset/default/example                          # a dev running here\n  \
reconciler-host explain podset/default/example --as-case cases/         # its last reconcile as a golden case\n  \
reconciler-host test plugins/podset.wasm cases/podset                   # replayed\n  \
kubectl create token prometheus -n monitoring > token   # a reader bound as deploy/metrics-reader.yaml says\n  \
reconciler-host explain podset/default/web --host https://10.0.0.7:8444 --token-file token --insecure-skip-tls-verify\n  \
reconciler-host explain kubernetescluster/prod --host http://127.0.0.1:9090 -o json"
    )]
    Explain(explain_cmd::ExplainArgs),
    /// Push a compiled plugin to an OCI registry (the CNCF Wasm artifact layout); prints its digest.
    #[command(
        after_help = "The plugin is loaded and checked first, as `inspect` does: a broken plugin is never \
pushed. Credentials come from $DOCKER_CONFIG/config.json or ~/.docker/config.json (`docker login` writes them).\n\n\
Examples:\n  \
reconciler-host keygen\n  \
reconciler-host push plugins/podset.wasm oci://registry.example/plugins/podset:1.0 --sign-key cosign.key\n  \
reconciler-host push podset.wasm oci://127.0.0.1:5000/podset:dev --insecure-registry 127.0.0.1:5000\n\n\
Then run it: `reconciler-host run --plugin oci://...@sha256:...`, or `kubectl apply` a Plugin (see crds/plugin.yaml)."
    )]
    Push(push_cmd::PushArgs),
    /// Write a new plugin project (Rust, Python or JavaScript) that builds and passes its golden cases.
    #[command(
        after_help = "The project holds the plugin's source with its metadata filled in, a native \
test, a CRD for a custom kind, an example object, golden cases (the reconcile's, and with --admission one per \
stub) and a README of the next commands: test natively, build the .wasm, run the golden cases.\n\n\
Examples:\n  \
reconciler-host new widget-operator --lang rust --kind example.com/v1alpha1/Widget\n  \
reconciler-host new widget-py --lang python --kind example.com/v1alpha1/Widget --admission\n  \
reconciler-host new restarter --lang js --kind apps/v1/Deployment"
    )]
    New(new_cmd::NewArgs),
    /// Write a cosign key pair (ECDSA P-256) for signing pushed plugins.
    #[command(
        after_help = "The private key is encrypted with $COSIGN_PASSWORD, as cosign does; cosign reads it too."
    )]
    Keygen(push_cmd::KeygenArgs),
}

/// Runs the parsed command; the exit code on success.
pub fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command {
        Command::Dev(args) => dev_cmd::run_cmd(&cli.sandbox, args),
        Command::Run(args) => run_cmd::run_cmd(&cli.sandbox, *args),
        Command::Simulate(args) => simulate_cmd::run(&cli.sandbox, args),
        Command::Plan(args) => plan_cmd::run(&cli.sandbox, args),
        Command::Test(args) => test_cmd::run(&cli.sandbox, args),
        Command::Inspect(args) => inspect_cmd::run(&cli.sandbox, args),
        Command::Explain(args) => explain_cmd::run(args),
        Command::Rbac(args) => rbac_cmd::run(&cli.sandbox, args),
        Command::Push(args) => push_cmd::push(&cli.sandbox, args),
        Command::Keygen(args) => push_cmd::keygen(args),
        Command::New(args) => new_cmd::run(args),
    }
}
