//! Options for reaching registries and naming plugins by reference.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;

use crate::registry::fetch::{FetchedPlugin, fetch_once};
use crate::registry::options::{DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT};
use crate::registry::served_files::ServedFiles;
use crate::registry::{
    ArtifactCache, Credentials, PluginReference, RegistryClient, RegistryOptions, TrustPolicy,
    TrustedKey,
};

/// How to reach registries: shared by `push` and every command that pulls.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Registries")]
pub struct RegistryAccessArgs {
    /// A PEM CA certificate to trust for registries, beside the system's roots (repeatable).
    #[arg(long = "registry-ca", value_name = "FILE")]
    pub registry_ca: Vec<PathBuf>,
    /// A registry (HOST:PORT) reached over plain HTTP instead of HTTPS (repeatable). Only for
    /// registries on a trusted network: nothing protects the bytes in transit but the digest.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registry: Vec<String>,
    /// Where pulled plugins are kept by digest; on a volume, a restart pulls nothing
    /// [default: <compile cache>/registry, or a directory of the process with --no-compile-cache].
    #[arg(long, env = "RECONCILER_HOST_REGISTRY_CACHE", value_name = "DIR")]
    pub registry_cache: Option<PathBuf>,
    /// The largest plugin pulled, in MiB: a manifest naming a bigger layer is refused, and a
    /// registry sending more than its manifest says is cut off.
    #[arg(long, value_name = "MIB", default_value_t = (DEFAULT_MAX_BYTES >> 20) as u32)]
    pub registry_max_mib: u32,
    /// How long any one registry request (a manifest, a signature, a plugin's layer) may take,
    /// from its start to its last byte: a registry that answers slowly or never is given up.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub registry_timeout_secs: u64,
}

impl RegistryAccessArgs {
    /// Credentials come from `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`.
    pub fn options(&self) -> anyhow::Result<RegistryOptions> {
        let mut extra_ca_pem = Vec::new();
        for file in &self.registry_ca {
            let pem = std::fs::read(file)
                .with_context(|| format!("reading --registry-ca {}", file.display()))?;
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                anyhow::bail!("--registry-ca {} is not a PEM certificate", file.display());
            }
            extra_ca_pem.push(pem);
        }
        for host in &self.insecure_registry {
            if host.contains('/') || host.is_empty() {
                anyhow::bail!(
                    "--insecure-registry {host:?}: give the registry as HOST:PORT, without a scheme or path"
                );
            }
        }
        if self.registry_max_mib == 0 {
            anyhow::bail!("--registry-max-mib is 0: it must be at least 1");
        }
        Ok(RegistryOptions {
            extra_ca_pem,
            insecure: self.insecure_registry.clone(),
            credentials: Credentials::from_user_config().context("reading the docker config")?,
            max_bytes: u64::from(self.registry_max_mib) << 20,
            timeout: std::time::Duration::from_secs(self.registry_timeout_secs),
        })
    }

    /// The artifact cache: `--registry-cache`, else `registry/` beside
    /// the compiled plugins, else a directory that lives as long as `keep`.
    pub fn cache(
        &self,
        compile_cache: Option<&Path>,
        keep: &mut Option<tempfile::TempDir>,
    ) -> anyhow::Result<ArtifactCache> {
        if let Some(dir) = &self.registry_cache {
            return Ok(ArtifactCache::new(dir));
        }
        if let Some(dir) = compile_cache {
            return Ok(ArtifactCache::new(dir.join("registry")));
        }
        let dir = tempfile::Builder::new()
            .prefix("reconciler-host-registry-")
            .tempdir()
            .context("creating a directory for pulled plugins")?;
        let cache = ArtifactCache::new(dir.path());
        *keep = Some(dir);
        Ok(cache)
    }
}

/// Plugins by reference, and the keys they must be signed with.
#[derive(Debug, Args, Clone)]
pub struct PluginRefArgs {
    /// A plugin in a registry: oci://HOST/REPO:TAG or oci://HOST/REPO@sha256:DIGEST (registry://
    /// too), repeatable. A tag is resolved once, at start; the digest is what runs. Served beside
    /// the plugins directory's files, under the same rules.
    #[arg(long = "plugin", value_name = "REF")]
    pub plugins: Vec<PluginReference>,
    /// A cosign public key (PEM) that every --plugin must carry a signature by (repeatable: any
    /// one of them will do); with `run --require-signatures`, every Plugin resource too. Without
    /// it, references run unsigned.
    #[arg(long = "verify-key", value_name = "FILE")]
    pub verify_key: Vec<PathBuf>,
    #[command(flatten)]
    pub access: RegistryAccessArgs,
}

impl PluginRefArgs {
    pub fn policy(&self) -> anyhow::Result<TrustPolicy> {
        let mut keys = Vec::new();
        for file in &self.verify_key {
            let pem = std::fs::read(file)
                .with_context(|| format!("reading --verify-key {}", file.display()))?;
            keys.push(TrustedKey::from_pem(file.display().to_string(), &pem)?);
        }
        Ok(TrustPolicy {
            keys,
            ..TrustPolicy::default()
        })
    }

    /// Pulls (and verifies, with --verify-key) `extra` and every --plugin;
    /// the first failure is the error.
    pub fn fetch_all(
        &self,
        extra: &[PluginReference],
        compile_cache: Option<&Path>,
        keep: &mut Option<tempfile::TempDir>,
    ) -> anyhow::Result<Vec<FetchedPlugin>> {
        let references: Vec<&PluginReference> = extra.iter().chain(&self.plugins).collect();
        if references.is_empty() {
            return Ok(Vec::new());
        }
        let client = RegistryClient::new(self.access.options()?);
        let cache = self.access.cache(compile_cache, keep)?;
        let policy = self.policy()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let mut fetched = Vec::new();
            for reference in references {
                let plugin = fetch_once(&client, &cache, &policy, reference, None).await?;
                tracing::info!("{plugin}");
                fetched.push(plugin);
            }
            Ok(fetched)
        })
    }
}

impl PluginRefArgs {
    /// `given` as a plugin file to load, and how to name it: a reference
    /// (a scheme: oci://, registry://) is pulled first, and verified with
    /// --verify-key; anything else is a path. `keep` holds what was pulled.
    pub fn file_of(
        &self,
        given: &str,
        compile_cache: Option<&Path>,
        keep: &mut Option<tempfile::TempDir>,
    ) -> anyhow::Result<(PathBuf, String)> {
        if !crate::registry::reference::looks_like_reference(given) {
            return Ok((PathBuf::from(given), given.to_string()));
        }
        let reference = PluginReference::parse(given)?;
        let only = PluginRefArgs {
            plugins: Vec::new(),
            ..self.clone()
        };
        let fetched = only.fetch_all(&[reference], compile_cache, keep)?;
        let fetched = fetched.into_iter().next().context("nothing was pulled")?;
        let shown = format!("{}@{}", fetched.reference, fetched.digest);
        Ok((fetched.path, shown))
    }

    /// Pulls the Plugin objects among `objects` (dev's and simulate's object
    /// files), as `--plugin` references with each one's own keys; each that
    /// fails is reported in the second list and left out.
    pub fn fetch_objects(
        &self,
        objects: &[serde_json::Value],
        compile_cache: Option<&Path>,
        keep: &mut Option<tempfile::TempDir>,
    ) -> anyhow::Result<(Vec<FetchedPlugin>, Vec<String>)> {
        let found = crate::plugin_resources::from_objects::plugin_objects(objects);
        if found.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let options = self.access.options()?;
        let cache = self.access.cache(compile_cache, keep)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (mut fetched, mut failed) = (Vec::new(), Vec::new());
        for plugin in found {
            let plugin = match plugin {
                Ok(plugin) => plugin,
                Err(why) => {
                    failed.push(why);
                    continue;
                }
            };
            match runtime.block_on(plugin.fetch(&options, &cache)) {
                Ok(done) => {
                    tracing::info!("Plugin {}: {done}", plugin.name);
                    fetched.push(done);
                }
                Err(e) => failed.push(format!("Plugin {}: {e}", plugin.name)),
            }
        }
        Ok((fetched, failed))
    }
}

/// Serves `fetched` from a directory of their own, each named for its
/// reference; `None` when there is nothing to serve.
pub fn serve_fetched(fetched: &[FetchedPlugin]) -> anyhow::Result<Option<ServedFiles>> {
    let Some(first) = fetched.first() else {
        return Ok(None);
    };
    // Beside the cache's components/, on the same filesystem.
    let cache_dir = first
        .path
        .parent()
        .and_then(|components| components.parent())
        .unwrap_or_else(|| Path::new("."));
    let served = ServedFiles::new(cache_dir)
        .context("creating the directory pulled plugins are served from")?;
    for plugin in fetched {
        served
            .place(&plugin.reference.file_stem(), &plugin.path)
            .with_context(|| format!("serving {}", plugin.reference))?;
    }
    Ok(Some(served))
}

/// The files of `fetched`, each shown as its reference.
pub fn fetched_files(fetched: &[FetchedPlugin]) -> Vec<(PathBuf, String)> {
    fetched
        .iter()
        .map(|p| (p.path.clone(), format!("{}@{}", p.reference, p.digest)))
        .collect()
}
