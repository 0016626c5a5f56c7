//! Reading one field of an object's `metadata`.
//!
//! Why not `Value::pointer("/metadata/uid")`: it unescapes every token of
//! the path into two new strings, and the host reads names, uids and
//! ownerReferences of objects on every watch event and every write; over a
//! converge of thousands of objects those allocations showed up as several
//! percent of the host's CPU.

use serde_json::Value;

pub trait MetadataField {
    /// `metadata.<field>`, if the object has a metadata map with it.
    fn metadata_field(&self, field: &str) -> Option<&Value>;
}

impl MetadataField for Value {
    fn metadata_field(&self, field: &str) -> Option<&Value> {
        self.get("metadata")?.get(field)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_what_pointer_reads() {
        let object = json!({"metadata": {"name": "web", "labels": {"a/b": "c"}}, "spec": {}});
        for field in ["name", "labels", "uid"] {
            assert_eq!(
                object.metadata_field(field),
                object.pointer(&format!("/metadata/{field}"))
            );
        }
        assert_eq!(json!({"metadata": "x"}).metadata_field("name"), None);
        assert_eq!(json!([1]).metadata_field("name"), None);
    }
}
