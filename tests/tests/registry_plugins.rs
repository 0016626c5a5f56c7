//! Plugins by OCI reference against a real registry (Debian's
//! docker-registry on loopback): `push` and `keygen`, then `inspect`,
//! `test` and `simulate` running what was pushed, signatures checked,
//! tampering and outages refused or ridden out.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use reconciler_tests::oci_registry::{Mode, PASSWORD, Registry, USER, skip};
use reconciler_tests::{example_plugin, root};

const SUITE: &str = "registry_plugins";
const HOST: &str = env!("CARGO_BIN_EXE_reconciler-host-under-test");

/// A scratch directory with an empty docker config (never the user's own)
/// and a registry cache of its own.
struct Workspace {
    dir: tempfile::TempDir,
    docker_config: PathBuf,
}

impl Workspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let docker_config = dir.path().join("docker");
        std::fs::create_dir_all(&docker_config).unwrap();
        Self { dir, docker_config }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs the host with `args`, the compile cache shared with other
    /// tests, and `cache` as the registry cache.
    fn host(&self, cache: &str, args: &[&str]) -> Output {
        let mut command = Command::new(HOST);
        command.args(args);
        if args[0] != "keygen" {
            command.arg("--registry-cache").arg(self.path(cache));
        }
        let out = command
            .env("DOCKER_CONFIG", &self.docker_config)
            .env("COSIGN_PASSWORD", "test-password")
            .env(
                "RECONCILER_HOST_COMPILE_CACHE",
                reconciler_tests::test_compile_cache_dir(),
            )
            .env_remove("RUST_LOG")
            .current_dir(root())
            .output()
            .expect("the host runs");
        eprintln!(
            "$ reconciler-host {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn keygen(&self, name: &str) -> (String, String) {
        let prefix = self.path(name);
        let out = self.host("cache", &["keygen", "--output", prefix.to_str().unwrap()]);
        assert!(out.status.success());
        let key = prefix.with_extension("key").display().to_string();
        let public = prefix.with_extension("pub").display().to_string();
        (key, public)
    }
}

fn push(
    ws: &Workspace,
    registry: &Registry,
    file: &Path,
    repo_tag: &str,
    key: Option<&str>,
) -> String {
    let reference = registry.reference(repo_tag);
    let mut args = vec!["push", file.to_str().unwrap(), &reference];
    if let Some(key) = key {
        args.extend(["--sign-key", key]);
    }
    let access = registry.access_args();
    args.extend(access.iter().map(String::as_str));
    let out = ws.host("cache", &args);
    assert!(out.status.success(), "push {repo_tag} failed");
    let digest = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "push prints the digest: {digest:?}"
    );
    digest
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_signed_push_runs_by_reference_in_inspect_test_and_simulate() {
    if skip(
        SUITE,
        "a_signed_push_runs_by_reference_in_inspect_test_and_simulate",
        Mode::Anonymous,
    ) {
        return;
    }
    let registry = Registry::start(Mode::Anonymous);
    let ws = Workspace::new();
    let (key, public) = ws.keygen("cosign");
    let private = std::fs::read_to_string(&key).unwrap();
    assert!(
        private.contains("ENCRYPTED"),
        "the private key is encrypted: {private}"
    );
    // Nothing broken is pushed: the file is loaded and checked first.
    let junk = ws.path("junk.wasm");
    std::fs::write(&junk, b"not a component").unwrap();
    let tag = registry.reference("plugins/podset:1");
    let mut args = vec!["push", junk.to_str().unwrap(), tag.as_str()];
    let access = registry.access_args();
    args.extend(access.iter().map(String::as_str));
    let out = ws.host("cache", &args);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not a WebAssembly file"),
        "{}",
        stderr(&out)
    );

    let digest = push(
        &ws,
        &registry,
        &example_plugin("podset"),
        "plugins/podset:1",
        Some(&key),
    );
    let access: Vec<&str> = access.iter().map(String::as_str).collect();

    // The CNCF Wasm artifact: its config lists the component's exports.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let pinned: oci_client::Reference = format!("{}/plugins/podset@{digest}", registry.host)
        .parse()
        .unwrap();
    let anonymous = oci_client::secrets::RegistryAuth::Anonymous;
    let (manifest, _) = runtime
        .block_on(client.pull_image_manifest(&pinned, &anonymous))
        .unwrap();
    assert_eq!(
        manifest.config.media_type,
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest.layers.len(), 1);
    assert_eq!(manifest.layers[0].media_type, "application/wasm");
    let mut config = Vec::new();
    runtime
        .block_on(client.pull_blob(&pinned, &manifest.config, &mut config))
        .unwrap();
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(
        config["layerDigests"][0],
        manifest.layers[0].digest.as_str()
    );
    let exports = config["component"]["exports"].as_array().unwrap();
    assert!(
        exports
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("reconciler:plugin/")),
        "{config}"
    );
    assert!(
        !config["component"]["imports"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{config}"
    );

    // By tag, verified: the plugin's own metadata, shown under its reference and digest.
    let reference = registry.reference("plugins/podset:1");
    let mut args = vec!["inspect", "--plugin", &reference, "--verify-key", &public];
    args.extend(&access);
    let out = ws.host("cache", &args);
    assert!(out.status.success());
    assert!(stdout(&out).contains("name: podset"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("file: {reference}@{digest}")),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("signed by key"), "{}", stderr(&out));

    // By digest, as a positional argument of `test`: the golden cases pass.
    let pinned = format!("oci://{}/plugins/podset@{digest}", registry.host);
    let mut args = vec![
        "test",
        &pinned,
        "plugins/podset/cases",
        "--verify-key",
        &public,
    ];
    args.extend(&access);
    let out = ws.host("cache", &args);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains(" passed, 0 failed"),
        "{}",
        stdout(&out)
    );

    // `simulate` with no plugin file at all: the reference alone reconciles.
    let empty = ws.path("no-plugins");
    std::fs::create_dir_all(&empty).unwrap();
    let mut args = vec![
        "simulate",
        "--plugins-dir",
        empty.to_str().unwrap(),
        "--plugin",
        &reference,
        "--objects",
        "examples/podset.yaml",
        "--crds",
        "crds",
    ];
    args.extend(&access);
    let out = ws.host("cache", &args);
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("kind: Deployment"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_wrong_key_a_missing_signature_and_a_tampered_blob_run_nothing() {
    if skip(
        SUITE,
        "a_wrong_key_a_missing_signature_and_a_tampered_blob_run_nothing",
        Mode::Anonymous,
    ) {
        return;
    }
    let registry = Registry::start(Mode::Anonymous);
    let ws = Workspace::new();
    let (key_a, public_a) = ws.keygen("a");
    let (_, public_b) = ws.keygen("b");
    let access = registry.access_args();
    let access: Vec<&str> = access.iter().map(String::as_str).collect();

    push(
        &ws,
        &registry,
        &example_plugin("podset"),
        "podset:signed",
        Some(&key_a),
    );
    push(
        &ws,
        &registry,
        &example_plugin("memcached"),
        "memcached:unsigned",
        None,
    );

    let inspect = |cache: &str, reference: &str, key: &str| {
        let reference = registry.reference(reference);
        let mut args = vec!["inspect", "--plugin", &reference, "--verify-key", key];
        args.extend(&access);
        ws.host(cache, &args)
    };
    let out = inspect("wrong-key", "podset:signed", &public_b);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("none of its 1 signature(s) verifies against"),
        "{}",
        stderr(&out)
    );
    assert!(
        !ws.path("wrong-key/components").exists(),
        "nothing was pulled for a wrong key"
    );

    let out = inspect("unsigned", "memcached:unsigned", &public_a);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("has no signature"),
        "{}",
        stderr(&out)
    );

    // A blob changed in the registry's storage: its digest no longer matches.
    let restarter = push(
        &ws,
        &registry,
        &example_plugin("rollout_restarter"),
        "restarter:1",
        Some(&key_a),
    );
    let manifest = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = oci_client::Client::new(oci_client::client::ClientConfig {
            protocol: oci_client::client::ClientProtocol::Http,
            ..Default::default()
        });
        let reference: oci_client::Reference = format!("{}/restarter@{restarter}", registry.host)
            .parse()
            .unwrap();
        runtime
            .block_on(
                client
                    .pull_image_manifest(&reference, &oci_client::secrets::RegistryAuth::Anonymous),
            )
            .unwrap()
            .0
    };
    let blob = registry.blob_file(&manifest.layers[0].digest);
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let out = inspect("tampered", "restarter:1", &public_a);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("digest"), "{}", stderr(&out));
    let kept: Vec<_> = std::fs::read_dir(ws.path("tampered/components"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        kept.is_empty(),
        "a tampered component is not kept: {kept:?}"
    );
}

#[test]
fn a_registry_that_is_down_serves_what_the_cache_holds() {
    if skip(
        SUITE,
        "a_registry_that_is_down_serves_what_the_cache_holds",
        Mode::Anonymous,
    ) {
        return;
    }
    let mut registry = Registry::start(Mode::Anonymous);
    let ws = Workspace::new();
    let digest = push(&ws, &registry, &example_plugin("podset"), "podset:1", None);
    let access = registry.access_args();
    let access: Vec<&str> = access.iter().map(String::as_str).collect();
    let tag = registry.reference("podset:1");
    let pinned = format!("oci://{}/podset@{digest}", registry.host);
    let inspect = |cache: &str, reference: &str| {
        let mut args = vec!["inspect", "--plugin", reference];
        args.extend(&access);
        ws.host(cache, &args)
    };
    assert!(inspect("volume", &tag).status.success());
    registry.stop();
    let out = inspect("volume", &pinned);
    assert!(
        out.status.success(),
        "a digest in the cache needs no registry"
    );
    let out = inspect("volume", &tag);
    assert!(
        out.status.success(),
        "a tag falls back to the digest it named last"
    );
    assert!(
        stderr(&out).contains("what it named last time"),
        "{}",
        stderr(&out)
    );
    let out = inspect("empty", &tag);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("cannot be reached"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn tls_and_basic_auth_take_the_ca_and_the_docker_config() {
    if skip(
        SUITE,
        "tls_and_basic_auth_take_the_ca_and_the_docker_config",
        Mode::AuthTls,
    ) {
        return;
    }
    let registry = Registry::start(Mode::AuthTls);
    let mut ws = Workspace::new();
    let file = example_plugin("podset");
    let reference = registry.reference("private/podset:1");
    let ca = registry.ca_file().display().to_string();

    let out = ws.host(
        "cache",
        &[
            "push",
            file.to_str().unwrap(),
            &reference,
            "--registry-ca",
            &ca,
        ],
    );
    assert!(!out.status.success(), "no credentials");
    assert!(
        stderr(&out).contains("refused the credentials"),
        "{}",
        stderr(&out)
    );

    let wrong = registry.docker_config(USER, "not the password");
    ws.docker_config = wrong.path().to_path_buf();
    let out = ws.host(
        "cache",
        &[
            "push",
            file.to_str().unwrap(),
            &reference,
            "--registry-ca",
            &ca,
        ],
    );
    assert!(!out.status.success(), "a wrong password");
    assert!(
        stderr(&out).contains("refused the credentials"),
        "{}",
        stderr(&out)
    );

    let right = registry.docker_config(USER, PASSWORD);
    ws.docker_config = right.path().to_path_buf();
    let out = ws.host("cache", &["push", file.to_str().unwrap(), &reference]);
    assert!(
        !out.status.success(),
        "the test CA is not trusted without --registry-ca"
    );
    let out = ws.host(
        "cache",
        &[
            "push",
            file.to_str().unwrap(),
            &reference,
            "--registry-ca",
            &ca,
        ],
    );
    assert!(out.status.success());
    let out = ws.host("cache", &["inspect", &reference, "--registry-ca", &ca]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("name: podset"), "{}", stdout(&out));
}

#[test]
fn kubewarden_layers_are_pulled_and_container_images_refused() {
    if skip(
        SUITE,
        "kubewarden_layers_are_pulled_and_container_images_refused",
        Mode::Anonymous,
    ) {
        return;
    }
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    let registry = Registry::start(Mode::Anonymous);
    let ws = Workspace::new();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..Default::default()
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let wasm = std::fs::read(example_plugin("podset")).unwrap();
    let push = |repo_tag: &str, layer_type: &str, config_type: &str| {
        let reference: oci_client::Reference =
            format!("{}/{repo_tag}", registry.host).parse().unwrap();
        let layer = ImageLayer::new(wasm.clone(), layer_type.to_string(), None);
        let config = Config::new(b"{}".to_vec(), config_type.to_string(), None);
        runtime
            .block_on(client.push(
                &reference,
                &[layer],
                config,
                &oci_client::secrets::RegistryAuth::Anonymous,
                None,
            ))
            .unwrap();
    };
    push(
        "policies/podset:kw",
        "application/vnd.wasm.content.layer.v1+wasm",
        "application/vnd.wasm.config.v1+json",
    );
    push(
        "images/podset:tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.config.v1+json",
    );
    let access = registry.access_args();
    let kubewarden = registry
        .reference("policies/podset:kw")
        .replace("oci://", "registry://");
    let mut args = vec!["inspect", kubewarden.as_str()];
    args.extend(access.iter().map(String::as_str));
    let out = ws.host("cache", &args);
    assert!(out.status.success());
    assert!(stdout(&out).contains("name: podset"), "{}", stdout(&out));

    let image = registry.reference("images/podset:tar");
    let mut args = vec!["inspect", image.as_str()];
    args.extend(access.iter().map(String::as_str));
    let out = ws.host("cache", &args);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not a plugin"), "{}", stderr(&out));
}

#[test]
fn dev_serves_the_plugin_objects_among_its_objects_with_their_keys() {
    if skip(
        SUITE,
        "dev_serves_the_plugin_objects_among_its_objects_with_their_keys",
        Mode::Anonymous,
    ) {
        return;
    }
    let registry = Registry::start(Mode::Anonymous);
    let ws = Workspace::new();
    let (key, public) = ws.keygen("cosign");
    push(
        &ws,
        &registry,
        &example_plugin("podset"),
        "plugins/podset:1",
        Some(&key),
    );
    let objects = ws.path("objects");
    std::fs::create_dir_all(&objects).unwrap();
    let example =
        std::fs::read_to_string(root().join("examples/by-reference/podset-plugin.yaml")).unwrap();
    let public = std::fs::read_to_string(&public).unwrap();
    let indented: String = public.lines().map(|l| format!("    {l}\n")).collect();
    let example = example.replace("127.0.0.1:5000", &registry.host).replace(
        "    -----BEGIN PUBLIC KEY-----\n    paste cosign.pub here\n    -----END PUBLIC KEY-----\n",
        &indented,
    );
    assert!(
        example.contains(&registry.host) && !example.contains("paste"),
        "{example}"
    );
    std::fs::write(objects.join("plugin.yaml"), example).unwrap();
    let missing = ws.path("no-plugins-dir");
    let out = ws.host(
        "cache",
        &[
            "dev",
            "--until-settled",
            "--objects",
            objects.to_str().unwrap(),
            "--plugins-dir",
            missing.to_str().unwrap(),
        ],
    );
    assert!(out.status.success());
    assert!(stdout(&out).contains("from-a-registry"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("loaded plugin podset"),
        "{}",
        stdout(&out)
    );

    // The same objects with a key that did not sign it: nothing serves, and dev says why.
    let (_, other) = ws.keygen("other");
    let other = std::fs::read_to_string(other).unwrap();
    let text = std::fs::read_to_string(objects.join("plugin.yaml")).unwrap();
    let other_indented: String = other.lines().map(|l| format!("    {l}\n")).collect();
    std::fs::write(
        objects.join("plugin.yaml"),
        text.replace(&indented, &other_indented),
    )
    .unwrap();
    let out = ws.host(
        "cache",
        &[
            "dev",
            "--until-settled",
            "--objects",
            objects.to_str().unwrap(),
            "--plugins-dir",
            missing.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success(), "no plugin at all serves");
    assert!(
        stdout(&out).contains("error: Plugin podset:")
            && stdout(&out).contains("none of its 1 signature(s) verifies"),
        "{}",
        stdout(&out)
    );
}

/// Keyless signatures as cosign makes them (a certificate from a Fulcio CA,
/// a Rekor bundle), here from a test CA and a test log whose roots are
/// given as files: the signer's identity is what verifies, a signature not
/// made with the certificate's key does not, nor does another identity.
#[test]
fn keyless_signatures_verify_against_a_trust_root_given_as_files() {
    if skip(
        SUITE,
        "keyless_signatures_verify_against_a_trust_root_given_as_files",
        Mode::Anonymous,
    ) {
        return;
    }
    use base64::Engine as _;
    use reconciler_host::registry::signatures::{
        self, KeylessIdentity, Signer, TrustPolicy, TrustRootFiles,
    };
    use reconciler_host::registry::{Digest, PluginReference, RegistryOptions};
    use sha2::Digest as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);

    let registry = Registry::start(Mode::Anonymous);
    let ws = Workspace::new();
    let digest = push(
        &ws,
        &registry,
        &example_plugin("podset"),
        "keyless/podset:1",
        None,
    );

    // A Fulcio-like CA and a leaf for ci@example.com, issuer https://issuer.example.
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test fulcio");
    ca_params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let ca = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_signer = sigstore::crypto::SigningScheme::ECDSA_P256_SHA256_ASN1
        .create_signer()
        .unwrap();
    let leaf_pem = leaf_signer
        .to_sigstore_keypair()
        .unwrap()
        .private_key_to_pem()
        .unwrap();
    let leaf_key = rcgen::KeyPair::from_pem(&leaf_pem).unwrap();
    let mut leaf_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf_params.subject_alt_names = vec![rcgen::SanType::Rfc822Name(
        "ci@example.com".try_into().unwrap(),
    )];
    leaf_params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
    leaf_params.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
        &[1, 3, 6, 1, 4, 1, 57264, 1, 1],
        b"https://issuer.example".to_vec(),
    )];
    let leaf_cert = leaf_params.signed_by(&leaf_key, &ca).unwrap();

    // A Rekor-like log: its signed entry timestamp over the canonical payload.
    let rekor = sigstore::crypto::SigningScheme::ECDSA_P256_SHA256_ASN1
        .create_signer()
        .unwrap();
    let rekor_pair = rekor.to_sigstore_keypair().unwrap();
    let log_id: String = sha2::Sha256::digest(rekor_pair.public_key_to_der().unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let integrated = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let body = b64(b"{}");
    let canonical = format!(
        r#"{{"body":"{body}","integratedTime":{integrated},"logID":"{log_id}","logIndex":1}}"#
    );
    let set = b64(&rekor.sign(canonical.as_bytes()).unwrap());
    let bundle = format!(
        r#"{{"SignedEntryTimestamp":"{set}","Payload":{{"body":"{body}","integratedTime":{integrated},"logIndex":1,"logID":"{log_id}"}}}}"#
    );

    let host = registry.host.clone();
    let payload = format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"{host}/keyless/podset"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let sig_tag: oci_client::Reference = format!(
        "{host}/keyless/podset:sha256-{}.sig",
        digest.trim_start_matches("sha256:")
    )
    .parse()
    .unwrap();
    // Replaces the digest's signatures with one layer signed by `signer`.
    let attach = |signer: &sigstore::crypto::SigStoreSigner| {
        let signature = b64(&signer.sign(payload.as_bytes()).unwrap());
        let annotations = std::collections::BTreeMap::from([
            ("dev.cosignproject.cosign/signature".to_string(), signature),
            (
                "dev.sigstore.cosign/certificate".to_string(),
                leaf_cert.pem(),
            ),
            ("dev.sigstore.cosign/chain".to_string(), ca_cert.pem()),
            ("dev.sigstore.cosign/bundle".to_string(), bundle.clone()),
        ]);
        let layer = oci_client::client::ImageLayer::new(
            payload.clone().into_bytes(),
            "application/vnd.dev.cosign.simplesigning.v1+json".into(),
            Some(annotations),
        );
        let config = oci_client::client::Config::new(
            b"{}".to_vec(),
            "application/vnd.oci.image.config.v1+json".into(),
            None,
        );
        // Pushed by hand: oci-client's canonical JSON leaves the PEM's
        // newlines unescaped, which the registry rightly refuses.
        let manifest = oci_client::manifest::OciImageManifest::build(
            std::slice::from_ref(&layer),
            &config,
            None,
        );
        runtime.block_on(async {
            client
                .push_blob(&sig_tag, layer.data.clone(), &manifest.layers[0].digest)
                .await
                .unwrap();
            client
                .push_blob(&sig_tag, config.data.clone(), &manifest.config.digest)
                .await
                .unwrap();
            client
                .push_manifest_raw(
                    &sig_tag,
                    serde_json::to_vec(&manifest).unwrap(),
                    "application/vnd.oci.image.manifest.v1+json"
                        .parse()
                        .unwrap(),
                )
                .await
                .unwrap();
        });
    };

    let dir = ws.path("trust-root");
    std::fs::create_dir_all(&dir).unwrap();
    let policy = |subject: &str| TrustPolicy {
        keyless: vec![KeylessIdentity {
            subject: subject.into(),
            issuer: "https://issuer.example".into(),
        }],
        trust_root: Some(TrustRootFiles {
            fulcio_pem: vec![ca_cert.pem().into_bytes()],
            rekor_pem: vec![rekor_pair.public_key_to_pem().unwrap().into_bytes()],
        }),
        ..TrustPolicy::default()
    };
    let options = RegistryOptions {
        insecure: vec![host.clone()],
        ..RegistryOptions::default()
    };
    let reference = PluginReference::parse(&registry.reference("keyless/podset:1")).unwrap();
    let digest = Digest::parse(&digest).unwrap();
    let anonymous = oci_client::secrets::RegistryAuth::Anonymous;
    let verify = |policy: &TrustPolicy| {
        runtime.block_on(signatures::verify(
            &options, policy, &reference, &digest, &anonymous,
        ))
    };

    attach(&leaf_signer);
    assert_eq!(
        verify(&policy("ci@example.com")).unwrap(),
        Signer::Keyless {
            subject: "ci@example.com".into(),
            issuer: "https://issuer.example".into()
        }
    );
    let other = verify(&policy("someone@example.com")).unwrap_err();
    assert_eq!(other.reason(), "SignatureNotTrusted", "{other}");

    // The same certificate and bundle, the payload signed by another key.
    let impostor = sigstore::crypto::SigningScheme::ECDSA_P256_SHA256_ASN1
        .create_signer()
        .unwrap();
    attach(&impostor);
    let forged = verify(&policy("ci@example.com")).unwrap_err();
    assert_eq!(forged.reason(), "SignatureNotTrusted", "{forged}");
}

/// `dev` follows its Plugin objects as their files change: a new source is
/// pulled and reloaded, a removed Plugin stops its plugin.
#[test]
fn dev_follows_edits_of_its_plugin_objects() {
    if skip(
        SUITE,
        "dev_follows_edits_of_its_plugin_objects",
        Mode::Anonymous,
    ) {
        return;
    }
    use std::io::BufRead as _;
    use std::time::{Duration, Instant};
    let registry = Registry::start(Mode::Anonymous);
    let ws = Workspace::new();
    push(&ws, &registry, &example_plugin("podset"), "podset:1", None);
    push(
        &ws,
        &registry,
        &reconciler_tests::test_plugin("podset-v2"),
        "podset:2",
        None,
    );
    let objects = ws.path("objects");
    std::fs::create_dir_all(&objects).unwrap();
    let plugin = |tag: &str| {
        format!(
            "apiVersion: reconciler-host.io/v1alpha1\nkind: Plugin\nmetadata: {{name: podset}}\nspec: {{source: \"{}\", insecure: true}}\n",
            registry.reference(&format!("podset:{tag}"))
        )
    };
    let podset =
        "apiVersion: example.com/v1alpha1\nkind: PodSet\nmetadata: {name: a}\nspec: {size: 1}\n";
    std::fs::write(objects.join("podset.yaml"), podset).unwrap();
    std::fs::write(objects.join("plugin.yaml"), plugin("1")).unwrap();
    let mut child = Command::new(HOST)
        .args([
            "dev",
            "--objects",
            objects.to_str().unwrap(),
            "--plugins-dir",
        ])
        .arg(ws.path("no-plugins"))
        .arg("--registry-cache")
        .arg(ws.path("cache"))
        .env("DOCKER_CONFIG", &ws.docker_config)
        .env(
            "RECONCILER_HOST_COMPILE_CACHE",
            reconciler_tests::test_compile_cache_dir(),
        )
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |needle: &str| {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return;
                }
            }
        }
        let _ = child.kill();
        panic!("dev never printed {needle:?}:\n{}", seen.join("\n"));
    };
    wait_for("loaded plugin podset 0.1.0");
    // The table comes from the loop, once the files are watched.
    wait_for("PLUGIN  KIND");
    std::fs::write(objects.join("plugin.yaml"), plugin("2")).unwrap();
    wait_for("reloaded plugin podset: 0.1.0");
    std::fs::remove_file(objects.join("plugin.yaml")).unwrap();
    wait_for("unloaded plugin podset");
    let _ = child.kill();
    let _ = child.wait();
}
