//! What differs between the languages a project can be written in: how
//! they are named, where the plugin's source and native test go, and their
//! own templates (build files, source, test, ignore file).

use super::template_set::{Template, template};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    #[value(alias = "javascript")]
    Js,
}

impl Language {
    /// Its name for people, and for the README's code blocks.
    pub(super) fn names(self) -> (&'static str, &'static str) {
        match self {
            Language::Rust => ("Rust", "rust"),
            Language::Python => ("Python", "python"),
            Language::Js => ("JavaScript", "javascript"),
        }
    }

    /// The plugin's source file in a project of plugin `name`.
    pub(super) fn source(self, name: &str) -> String {
        match self {
            Language::Rust => "src/lib.rs".to_string(),
            Language::Python => "app.py".to_string(),
            Language::Js => format!("{name}.js"),
        }
    }

    /// The native test's file in a project of plugin `name`.
    pub(super) fn native_test(self, name: &str) -> String {
        match self {
            Language::Rust => format!("tests/{}.rs", name.replace('-', "_")),
            Language::Python => "test_app.py".to_string(),
            Language::Js => format!("{name}.test.js"),
        }
    }

    /// The language's own templates, for plugin `name`.
    pub(super) fn templates(self, name: &str) -> Vec<Template> {
        match self {
            Language::Rust => vec![
                template!("Cargo.toml", "rust/Cargo.toml"),
                template!(self.source(name), "rust/lib.rs"),
                template!(self.native_test(name), "rust/test.rs"),
                template!(".gitignore", "rust/gitignore"),
            ],
            Language::Python => vec![
                template!(self.source(name), "python/app.py"),
                template!(self.native_test(name), "python/test_app.py"),
                template!("requirements.txt", "python/requirements.txt"),
                template!(".gitignore", "python/gitignore"),
            ],
            Language::Js => vec![
                template!(self.source(name), "js/plugin.js"),
                template!(self.native_test(name), "js/plugin.test.js"),
                template!("package.json", "js/package.json"),
                template!(".npmrc", "js/npmrc"),
                template!(".gitignore", "js/gitignore"),
            ],
        }
    }
}
