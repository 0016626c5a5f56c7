//! Which templates a project gets and where each lands: those every
//! project has (README, example, golden cases, a custom kind's CRD); each
//! language adds its own ([`super::language`]).

use reconciler_contract::KindRef;

use super::names::plural_of;

/// A template under `templates/` and the path its rendering takes in the
/// project.
pub(super) struct Template {
    pub path: String,
    /// Its name under `templates/`, as an error names it.
    pub name: &'static str,
    pub text: &'static str,
}

/// The template `templates/NAME`, rendered to `path`.
macro_rules! template {
    ($path:expr, $name:literal) => {
        $crate::scaffold::template_set::Template {
            path: $path.into(),
            name: $name,
            text: include_str!(concat!("templates/", $name)),
        }
    };
}
pub(super) use template;

/// The templates of every language: README, example object, the golden
/// case of the reconcile, a custom kind's CRD, and with `admission` a case
/// for each stub.
pub(super) fn common_templates(kind: &KindRef, custom: bool, admission: bool) -> Vec<Template> {
    let kind_lower = kind.kind.to_ascii_lowercase();
    let mut templates = vec![
        template!("README.md", "common/README.md"),
        template!(format!("examples/{kind_lower}.yaml"), "common/example.yaml"),
        template!("cases/reconciled.yaml", "common/case-reconciled.yaml"),
    ];
    if custom {
        templates.push(template!(
            format!("crds/{}.yaml", plural_of(&kind.kind)),
            "common/crd.yaml"
        ));
    }
    if admission {
        let (validated, defaulted) = if custom {
            ("admission-negative-size-denied", "admission-size-defaulted")
        } else {
            ("admission-allowed", "admission-unchanged")
        };
        templates.push(template!(
            format!("cases/{validated}.yaml"),
            "common/case-admission-validate.yaml"
        ));
        templates.push(template!(
            format!("cases/{defaulted}.yaml"),
            "common/case-admission-defaults.yaml"
        ));
    }
    templates
}
