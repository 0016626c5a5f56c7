//! `reconciler-host new`: a plugin project from nothing, in Rust, Python or
//! JavaScript, that builds and passes its first golden case as written.
//!
//! What a project holds: the plugin's source with its metadata filled in, a
//! native test, a CRD for a custom kind, an example object, golden cases
//! (one of the reconcile, and with admission one per stub), and a README
//! whose commands (test, build, golden cases) are the ones `scripts/check-new`
//! runs. The templates are files under `templates/`, rendered by
//! [`render`]; the pinned tool versions come from the SDK checkout the
//! project uses, so a project never pins other versions than the SDK's.

pub mod render;

use std::fmt;
use std::path::{Path, PathBuf};

use reconciler_contract::KindRef;
use thiserror::Error;

use crate::cluster::backend::KindScope;
use crate::cluster::embedded::kind_scopes::KindScopes;
use render::{RenderError, Values, render};

#[derive(Debug, Error)]
pub enum ScaffoldError {
    #[error(
        "{0:?} is not a plugin name: use lowercase letters, digits and '-', starting with a letter, at most 63 (e.g. widget-operator)"
    )]
    Name(String),
    #[error(
        "{given:?} is not GROUP/VERSION/KIND: {why} (e.g. example.com/v1alpha1/Widget, apps/v1/Deployment, or v1/ConfigMap for the core group)"
    )]
    Kind { given: String, why: &'static str },
    #[error("--cluster-scoped is for custom kinds: {kind} is served {scope} by every API server")]
    BuiltinScope { kind: String, scope: &'static str },
    #[error(
        "{0} is not a reconciler-host checkout (no plugins/sdk, sdk-python, sdk-js and wit/ there): give --sdk the directory of your clone"
    )]
    NotACheckout(PathBuf),
    #[error("cannot read the SDK's pinned versions from {path}: {why}")]
    Pins { path: PathBuf, why: String },
    #[error(
        "{0} exists and is not empty: new writes a fresh directory (choose another NAME or --dir, or remove it)"
    )]
    Exists(PathBuf),
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the host's template {template} is broken")]
    Template {
        template: &'static str,
        source: RenderError,
    },
}

/// The plugin's name: a DNS-1123 label starting with a letter, so it is
/// also a crate, file and package name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginName(String);

impl PluginName {
    pub fn parse(name: &str) -> Result<Self, ScaffoldError> {
        let ok = (1..=63).contains(&name.len())
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if ok {
            Ok(Self(name.to_string()))
        } else {
            Err(ScaffoldError::Name(name.to_string()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PluginName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `GROUP/VERSION/KIND`, or `VERSION/KIND` for the core group.
pub fn parse_kind(given: &str) -> Result<KindRef, ScaffoldError> {
    let bad = |why| ScaffoldError::Kind {
        given: given.to_string(),
        why,
    };
    let parts: Vec<&str> = given.split('/').collect();
    let (group, version, kind) = match parts.as_slice() {
        [version, kind] => ("", *version, *kind),
        [group, version, kind] => (*group, *version, *kind),
        _ => return Err(bad("it needs two or three parts separated by '/'")),
    };
    let dns = |s: &str| {
        !s.is_empty()
            && s.split('.').all(|label| {
                !label.is_empty()
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    };
    if parts.len() == 3 && !dns(group) {
        return Err(bad("the group is a lowercase DNS name"));
    }
    let version_ok = version.starts_with('v')
        && version[1..].starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !version_ok {
        return Err(bad("the version looks like v1, v1beta1 or v1alpha1"));
    }
    let kind_ok = kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !kind_ok {
        return Err(bad("the kind is CamelCase letters and digits"));
    }
    Ok(KindRef::new(group, version, kind))
}

/// Whether a group is one the Kubernetes project serves (its kinds need no
/// CRD): the core group, the unsuffixed built-in groups and `*.k8s.io`.
pub fn is_builtin_group(group: &str) -> bool {
    const UNSUFFIXED: &[&str] = &["", "apps", "batch", "autoscaling", "policy"];
    UNSUFFIXED.contains(&group) || group == "k8s.io" || group.ends_with(".k8s.io")
}

/// The resource name a CRD gives a kind: its plural in lowercase.
pub fn plural_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    let consonant_y =
        lower.ends_with('y') && !lower[..lower.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
    if consonant_y {
        format!("{}ies", &lower[..lower.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

fn snake_of(kind: &str) -> String {
    let mut out = String::new();
    for (i, c) in kind.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    #[value(alias = "javascript")]
    Js,
}

/// A reconciler-host checkout: where a project's SDK, WIT and pinned tool
/// versions come from.
#[derive(Clone, Debug)]
pub struct Checkout(PathBuf);

impl Checkout {
    pub fn at(dir: &Path) -> Result<Self, ScaffoldError> {
        let has = |p: &str| dir.join(p).exists();
        let complete = has("plugins/sdk/Cargo.toml")
            && has("sdk-python/pyproject.toml")
            && has("sdk-js/package.json")
            && has("wit/reconciler.wit");
        if !complete {
            return Err(ScaffoldError::NotACheckout(dir.to_path_buf()));
        }
        let absolute = std::path::absolute(dir).map_err(|e| ScaffoldError::Write {
            path: dir.to_path_buf(),
            source: e,
        })?;
        Ok(Self(absolute))
    }

    /// The checkout this binary was built from, if it is still there.
    pub fn of_this_build() -> Option<Self> {
        let host = Path::new(env!("CARGO_MANIFEST_DIR"));
        Self::at(host.parent()?).ok()
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The Python build tools the SDK pins (`sdk-python/requirements-build.txt`).
    fn python_pins(&self) -> Result<Vec<String>, ScaffoldError> {
        let path = self.0.join("sdk-python/requirements-build.txt");
        let text = std::fs::read_to_string(&path).map_err(|e| ScaffoldError::Pins {
            path: path.clone(),
            why: e.to_string(),
        })?;
        Ok(text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect())
    }

    /// The componentize-js version the SDK pins (`sdk-js/package.json`).
    fn componentize_js(&self) -> Result<String, ScaffoldError> {
        let path = self.0.join("sdk-js/package.json");
        let bad = |why: String| ScaffoldError::Pins {
            path: path.clone(),
            why,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
        let manifest: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        manifest["devDependencies"]["@bytecodealliance/componentize-js"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| bad("no devDependencies.@bytecodealliance/componentize-js".into()))
    }
}

/// Everything `new` was asked for, checked.
#[derive(Clone, Debug)]
pub struct Scaffold {
    pub name: PluginName,
    pub language: Language,
    pub kind: KindRef,
    pub admission: bool,
    pub scope: KindScope,
    pub checkout: Checkout,
}

impl Scaffold {
    pub fn new(
        name: PluginName,
        language: Language,
        kind: KindRef,
        admission: bool,
        cluster_scoped: bool,
        checkout: Checkout,
    ) -> Result<Self, ScaffoldError> {
        let scope = if is_builtin_group(&kind.group) {
            let scope = KindScopes::default().scope_of(&kind);
            if cluster_scoped && scope != KindScope::Cluster {
                return Err(ScaffoldError::BuiltinScope {
                    kind: format!("{} {}", kind.api_version(), kind.kind),
                    scope: "namespaced",
                });
            }
            scope
        } else if cluster_scoped {
            KindScope::Cluster
        } else {
            KindScope::Namespaced
        };
        Ok(Self {
            name,
            language,
            kind,
            admission,
            scope,
            checkout,
        })
    }

    pub fn is_custom(&self) -> bool {
        !is_builtin_group(&self.kind.group)
    }

    fn values(&self) -> Result<Values, ScaffoldError> {
        let name = self.name.as_str();
        let kind = &self.kind.kind;
        let (language, doc_language, source, native_test) = match self.language {
            Language::Rust => (
                "Rust",
                "rust",
                "src/lib.rs".to_string(),
                format!("tests/{}.rs", name.replace('-', "_")),
            ),
            Language::Python => (
                "Python",
                "python",
                "app.py".to_string(),
                "test_app.py".to_string(),
            ),
            Language::Js => (
                "JavaScript",
                "javascript",
                format!("{name}.js"),
                format!("{name}.test.js"),
            ),
        };
        let componentize_js = match self.language {
            Language::Js => self.checkout.componentize_js()?,
            _ => String::new(),
        };
        Ok(Values::default()
            .var("name", name)
            .var("crate", name.replace('-', "_"))
            .var("group", &self.kind.group)
            .var("version", &self.kind.version)
            .var("kind", kind)
            .var("api_version", self.kind.api_version())
            .var("kind_lower", kind.to_ascii_lowercase())
            .var("kind_snake", snake_of(kind))
            .var("const", snake_of(kind).to_ascii_uppercase())
            .var("plural", plural_of(kind))
            .var(
                "scope",
                match self.scope {
                    KindScope::Namespaced => "Namespaced",
                    KindScope::Cluster => "Cluster",
                },
            )
            .var("sdk", self.checkout.path().display().to_string())
            .var("language", language)
            .var("doc_language", doc_language)
            .var("source", source)
            .var("native_test", native_test)
            .var("componentize_js", componentize_js)
            .flag("custom", self.is_custom())
            .flag("namespaced", self.scope == KindScope::Namespaced)
            .flag("admission", self.admission)
            .flag("rust", self.language == Language::Rust)
            .flag("python", self.language == Language::Python)
            .flag("js", self.language == Language::Js))
    }

    /// The project's files, by path within it.
    pub fn files(&self) -> Result<Vec<(PathBuf, String)>, ScaffoldError> {
        let values = self.values()?;
        let name = self.name.as_str();
        let kind_lower = self.kind.kind.to_ascii_lowercase();
        let mut templates: Vec<(String, &'static str, &'static str)> = vec![
            (
                "README.md".into(),
                "common/README.md",
                include_str!("templates/common/README.md"),
            ),
            (
                format!("examples/{kind_lower}.yaml"),
                "common/example.yaml",
                include_str!("templates/common/example.yaml"),
            ),
            (
                "cases/reconciled.yaml".into(),
                "common/case-reconciled.yaml",
                include_str!("templates/common/case-reconciled.yaml"),
            ),
        ];
        if self.is_custom() {
            templates.push((
                format!("crds/{}.yaml", plural_of(&self.kind.kind)),
                "common/crd.yaml",
                include_str!("templates/common/crd.yaml"),
            ));
        }
        if self.admission {
            let (validated, defaulted) = if self.is_custom() {
                ("admission-negative-size-denied", "admission-size-defaulted")
            } else {
                ("admission-allowed", "admission-unchanged")
            };
            templates.push((
                format!("cases/{validated}.yaml"),
                "common/case-admission-validate.yaml",
                include_str!("templates/common/case-admission-validate.yaml"),
            ));
            templates.push((
                format!("cases/{defaulted}.yaml"),
                "common/case-admission-defaults.yaml",
                include_str!("templates/common/case-admission-defaults.yaml"),
            ));
        }
        match self.language {
            Language::Rust => templates.extend([
                (
                    "Cargo.toml".into(),
                    "rust/Cargo.toml",
                    include_str!("templates/rust/Cargo.toml"),
                ),
                (
                    "src/lib.rs".into(),
                    "rust/lib.rs",
                    include_str!("templates/rust/lib.rs"),
                ),
                (
                    format!("tests/{}.rs", name.replace('-', "_")),
                    "rust/test.rs",
                    include_str!("templates/rust/test.rs"),
                ),
                (
                    ".gitignore".into(),
                    "rust/gitignore",
                    include_str!("templates/rust/gitignore"),
                ),
            ]),
            Language::Python => templates.extend([
                (
                    "app.py".into(),
                    "python/app.py",
                    include_str!("templates/python/app.py"),
                ),
                (
                    "test_app.py".into(),
                    "python/test_app.py",
                    include_str!("templates/python/test_app.py"),
                ),
                (
                    "requirements.txt".into(),
                    "python/requirements.txt",
                    include_str!("templates/python/requirements.txt"),
                ),
                (
                    ".gitignore".into(),
                    "python/gitignore",
                    include_str!("templates/python/gitignore"),
                ),
            ]),
            Language::Js => templates.extend([
                (
                    format!("{name}.js"),
                    "js/plugin.js",
                    include_str!("templates/js/plugin.js"),
                ),
                (
                    format!("{name}.test.js"),
                    "js/plugin.test.js",
                    include_str!("templates/js/plugin.test.js"),
                ),
                (
                    "package.json".into(),
                    "js/package.json",
                    include_str!("templates/js/package.json"),
                ),
                (
                    ".npmrc".into(),
                    "js/npmrc",
                    include_str!("templates/js/npmrc"),
                ),
                (
                    ".gitignore".into(),
                    "js/gitignore",
                    include_str!("templates/js/gitignore"),
                ),
            ]),
        }
        let mut files = Vec::with_capacity(templates.len());
        for (path, template, text) in templates {
            let mut rendered = render(text, &values)
                .map_err(|source| ScaffoldError::Template { template, source })?;
            if template == "python/requirements.txt" {
                for pin in self.checkout.python_pins()? {
                    rendered.push_str(&pin);
                    rendered.push('\n');
                }
            }
            files.push((PathBuf::from(path), rendered));
        }
        Ok(files)
    }

    /// Writes the project to `dir`, which must not exist or be empty. The
    /// files go to a scratch directory beside it first, renamed into place
    /// at the end, so a failure leaves no half-written project.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, ScaffoldError> {
        let write_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ScaffoldError::Write { path, source }
        };
        if let Ok(mut entries) = std::fs::read_dir(dir) {
            if entries.next().is_some() {
                return Err(ScaffoldError::Exists(dir.to_path_buf()));
            }
            std::fs::remove_dir(dir).map_err(write_err(dir))?;
        }
        let files = self.files()?;
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(write_err(&parent))?;
        let scratch = parent.join(format!(".{}.new-{}", self.name, std::process::id()));
        let result = (|| {
            for (path, text) in &files {
                let target = scratch.join(path);
                if let Some(dir) = target.parent() {
                    std::fs::create_dir_all(dir).map_err(write_err(dir))?;
                }
                std::fs::write(&target, text).map_err(write_err(&target))?;
            }
            std::fs::rename(&scratch, dir).map_err(write_err(dir))
        })();
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        result.map(|()| files.into_iter().map(|(p, _)| p).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkout() -> Checkout {
        Checkout::of_this_build().expect("tests run in the checkout")
    }

    fn scaffold(language: Language, kind: &str, admission: bool) -> Scaffold {
        Scaffold::new(
            PluginName::parse("widget-operator").unwrap(),
            language,
            parse_kind(kind).unwrap(),
            admission,
            false,
            checkout(),
        )
        .unwrap()
    }

    #[test]
    fn names_and_kinds_are_checked_with_what_would_be_right() {
        for bad in [
            "",
            "Widget",
            "1widget",
            "widget_op",
            "widget-",
            &"a".repeat(64),
        ] {
            assert!(PluginName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(PluginName::parse("widget-operator2").is_ok());
        let kind = parse_kind("example.com/v1alpha1/Widget").unwrap();
        assert_eq!(
            (
                kind.group.as_str(),
                kind.version.as_str(),
                kind.kind.as_str()
            ),
            ("example.com", "v1alpha1", "Widget")
        );
        assert_eq!(parse_kind("v1/ConfigMap").unwrap().group, "");
        for bad in [
            "Widget",
            "example.com/Widget/v1",
            "Example.com/v1/Widget",
            "example.com/1/Widget",
            "example.com/v1/widget",
            "a/b/c/d",
        ] {
            let err = parse_kind(bad).unwrap_err().to_string();
            assert!(err.contains("e.g. example.com/v1alpha1/Widget"), "{err}");
        }
    }

    #[test]
    fn plurals_follow_the_usual_english_rules() {
        for (kind, plural) in [
            ("Widget", "widgets"),
            ("Policy", "policies"),
            ("Gateway", "gateways"),
            ("Ingress", "ingresses"),
            ("Box", "boxes"),
            ("Mesh", "meshes"),
        ] {
            assert_eq!(plural_of(kind), plural);
        }
    }

    #[test]
    fn builtin_kinds_get_no_crd_and_their_real_scope() {
        let deployment = scaffold(Language::Js, "apps/v1/Deployment", false);
        assert!(!deployment.is_custom());
        let files = deployment.files().unwrap();
        assert!(files.iter().all(|(p, _)| !p.starts_with("crds")));
        let namespace = scaffold(Language::Rust, "v1/Namespace", false);
        assert_eq!(namespace.scope, KindScope::Cluster);
        let example = namespace.files().unwrap();
        let (_, text) = example
            .iter()
            .find(|(p, _)| p.starts_with("examples"))
            .unwrap();
        assert!(!text.contains("namespace:"), "{text}");
        let refused = Scaffold::new(
            PluginName::parse("x").unwrap(),
            Language::Rust,
            parse_kind("apps/v1/Deployment").unwrap(),
            false,
            true,
            checkout(),
        );
        assert!(matches!(refused, Err(ScaffoldError::BuiltinScope { .. })));
    }

    #[test]
    fn every_template_renders_for_every_language_kind_and_admission() {
        for language in [Language::Rust, Language::Python, Language::Js] {
            for kind in ["example.com/v1alpha1/Widget", "v1/ConfigMap"] {
                for admission in [false, true] {
                    let files = scaffold(language, kind, admission).files().unwrap();
                    let cases = files.iter().filter(|(p, _)| p.starts_with("cases")).count();
                    assert_eq!(cases, if admission { 3 } else { 1 });
                    for (path, text) in &files {
                        assert!(!text.contains("{{"), "{path:?} keeps a tag:\n{text}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_projects_pin_the_sdks_own_tool_versions() {
        let python = scaffold(Language::Python, "example.com/v1/Widget", false);
        let (_, requirements) = python
            .files()
            .unwrap()
            .into_iter()
            .find(|(p, _)| p == Path::new("requirements.txt"))
            .unwrap();
        for pin in checkout().python_pins().unwrap() {
            assert!(requirements.contains(&pin), "{requirements}");
        }
        let js = scaffold(Language::Js, "example.com/v1/Widget", false);
        let (_, package) = js
            .files()
            .unwrap()
            .into_iter()
            .find(|(p, _)| p == Path::new("package.json"))
            .unwrap();
        let package: serde_json::Value = serde_json::from_str(&package).unwrap();
        assert_eq!(
            package["devDependencies"]["@bytecodealliance/componentize-js"],
            checkout().componentize_js().unwrap()
        );
    }

    #[test]
    fn an_existing_directory_with_files_is_never_written_into() {
        let dir = std::env::temp_dir().join(format!("scaffold-exists-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "mine").unwrap();
        let err = scaffold(Language::Python, "example.com/v1/Widget", false)
            .write(&dir)
            .unwrap_err();
        assert!(matches!(err, ScaffoldError::Exists(_)));
        assert_eq!(
            std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
            "mine"
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
