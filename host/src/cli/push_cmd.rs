//! `reconciler-host push` and `reconciler-host keygen`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use super::registry_args::RegistryAccessArgs;
use super::sandbox_args::SandboxArgs;
use crate::registry::signatures::{self, PASSWORD_ENV};
use crate::registry::{PluginReference, RegistryClient};

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The compiled plugin (.wasm); it is loaded and checked as `inspect` does before anything is sent.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Where to push it: oci://HOST/REPO:TAG (registry:// too).
    #[arg(value_name = "REF")]
    pub reference: PluginReference,
    /// Sign the pushed digest with this cosign private key (cosign.key, from `reconciler-host
    /// keygen` or `cosign generate-key-pair`); its password is read from COSIGN_PASSWORD. The
    /// signature replaces whatever the digest's sha256-<digest>.sig tag held.
    #[arg(long, value_name = "KEY")]
    pub sign_key: Option<PathBuf>,
    #[command(flatten)]
    pub access: RegistryAccessArgs,
}

pub fn push(sandbox: &SandboxArgs, args: PushArgs) -> anyhow::Result<ExitCode> {
    if args.reference.digest().is_some() {
        anyhow::bail!(
            "push to a tag (oci://HOST/REPO:TAG): the digest is what the registry computes"
        );
    }
    let key = match &args.sign_key {
        None => None,
        Some(path) => {
            let pem = std::fs::read(path)
                .with_context(|| format!("reading --sign-key {}", path.display()))?;
            let password = std::env::var(PASSWORD_ENV).unwrap_or_default();
            Some(
                signatures::signing_key(&pem, password.as_bytes())
                    .with_context(|| format!("--sign-key {}", path.display()))?,
            )
        }
    };
    let sandbox = sandbox.sandbox()?;
    let plugin = sandbox.load(&args.file)?;
    let wasm =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let interfaces = sandbox.interfaces(&wasm)?;
    let client = RegistryClient::new(args.access.options()?);
    let auth = client.auth_for(&args.reference, None);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let digest = runtime.block_on(async {
        let digest = client
            .push(&args.reference, wasm, interfaces.into(), &auth)
            .await?;
        if let Some(key) = key {
            signatures::sign(client.options(), &args.reference, &digest, key, &auth).await?;
        }
        anyhow::Ok(digest)
    })?;
    eprintln!(
        "pushed {} {} ({}) to {}{}",
        plugin.name(),
        plugin.metadata().version,
        plugin.metadata().primary,
        args.reference,
        if args.sign_key.is_some() {
            ", signed"
        } else {
            ""
        }
    );
    // stdout is the digest alone, for scripts: PLUGIN_DIGEST=$(reconciler-host push ...).
    println!("{digest}");
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Where to write the pair: PREFIX.key (private, encrypted with COSIGN_PASSWORD, mode 0600)
    /// and PREFIX.pub (public).
    #[arg(long, default_value = "cosign", value_name = "PREFIX")]
    pub output: PathBuf,
    /// Replace existing files.
    #[arg(long)]
    pub force: bool,
}

pub fn keygen(args: KeygenArgs) -> anyhow::Result<ExitCode> {
    let private = args.output.with_extension("key");
    let public = args.output.with_extension("pub");
    for path in [&private, &public] {
        if path.exists() && !args.force {
            anyhow::bail!("{} exists; pass --force to replace it", path.display());
        }
    }
    let password = std::env::var(PASSWORD_ENV).unwrap_or_default();
    if password.is_empty() {
        eprintln!(
            "note: {PASSWORD_ENV} is empty, so the private key is encrypted with an empty password"
        );
    }
    let (private_pem, public_pem) = signatures::generate_key_pair(password.as_bytes())?;
    write_private(&private, private_pem.as_bytes())?;
    std::fs::write(&public, public_pem).with_context(|| format!("writing {}", public.display()))?;
    eprintln!(
        "wrote {} (keep it secret) and {} (give it to --verify-key or a Plugin's spec.verification)",
        private.display(),
        public.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
