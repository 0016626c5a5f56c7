//! A project as `new` was asked for it: checked (a built-in kind keeps its
//! real scope), its files rendered from the templates, and written to a
//! directory all at once or not at all.

use std::path::{Path, PathBuf};

use reconciler_contract::KindRef;

use super::checkout::Checkout;
use super::error::ScaffoldError;
use super::language::Language;
use super::names::{PluginName, is_builtin_group, plural_of, snake_of};
use super::render::{Values, render};
use super::template_set::{Template, common_templates};
use crate::cluster::backend::KindScope;
use crate::cluster::embedded::kind_scopes::KindScopes;

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
        let (language, doc_language) = self.language.names();
        let source = self.language.source(name);
        let native_test = self.language.native_test(name);
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
        let mut templates = common_templates(&self.kind, self.is_custom(), self.admission);
        templates.extend(self.language.templates(self.name.as_str()));
        let mut files = Vec::with_capacity(templates.len());
        for Template { path, name, text } in templates {
            let mut rendered = render(text, &values).map_err(|source| ScaffoldError::Template {
                template: name,
                source,
            })?;
            if name == "python/requirements.txt" {
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
    use crate::scaffold::names::parse_kind;

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
