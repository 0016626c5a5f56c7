//! Names the built-in controllers give what they create, shaped as
//! kube-controller-manager shapes them but derived from the objects instead
//! of a random source, so a simulation prints the same names every run.

use serde_json::Value;

/// The characters Kubernetes uses for generated name suffixes and the
/// pod-template-hash: no vowels (no words) and no look-alike digits.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// 32-bit FNV-1a, the hash kube-controller-manager uses for the
/// pod-template-hash too.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

/// Maps each byte onto the safe alphabet, as Kubernetes encodes its hashes.
fn safe_encode(text: &str) -> String {
    text.bytes()
        .map(|b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
        .collect()
}

/// The `pod-template-hash` label of a Deployment's template: the decimal
/// text of a hash of the template, safely encoded (up to 10 characters).
/// The hash input differs from the real controller's (it hashes Go's
/// printing of the defaulted template), so the values differ, not the shape.
pub fn pod_template_hash(template: &Value, collision_count: u32) -> String {
    let mut bytes = serde_json::to_vec(template).unwrap_or_default();
    bytes.extend_from_slice(&collision_count.to_be_bytes());
    safe_encode(&fnv1a(&bytes).to_string())
}

/// A five-character suffix for `generateName`, from `seed`.
pub fn name_suffix(seed: &str) -> String {
    let mut hash = fnv1a(seed.as_bytes());
    let mut suffix = String::with_capacity(5);
    for _ in 0..5 {
        let len = ALPHABET.len() as u32;
        suffix.push(char::from(ALPHABET[(hash % len) as usize]));
        hash /= len;
    }
    suffix
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hashes_look_like_the_real_ones_and_follow_the_template() {
        let a = pod_template_hash(&json!({"metadata": {"labels": {"app": "a"}}}), 0);
        let b = pod_template_hash(&json!({"metadata": {"labels": {"app": "b"}}}), 0);
        assert_ne!(a, b);
        assert!((1..=10).contains(&a.len()), "{a}");
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)), "{a}");
        assert_eq!(
            a,
            pod_template_hash(&json!({"metadata": {"labels": {"app": "a"}}}), 0)
        );
        let suffix = name_suffix("x/1");
        assert_eq!(suffix.len(), 5);
        assert_ne!(suffix, name_suffix("x/2"));
    }
}
