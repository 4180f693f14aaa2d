//! Cache keys: the SHA-256 of what kind of entry it is and the canonical JSON of everything
//! that decides its value, so two calls share an entry exactly when nothing that could change
//! the answer differs.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::inference::Request;

/// Bumped when what a key covers changes, so old entries are never read under new rules.
const KEY_VERSION: &[u8] = b"pagantic-cache-1";

/// The SHA-256 naming one cache entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(pub [u8; 32]);

impl Key {
    /// The key of an entry of `kind` decided by `parts` (each serialised as JSON).
    pub fn of(kind: &str, parts: &[&dyn erased::Part]) -> Key {
        Key(hasher(kind, parts).finalize().into())
    }

    /// The key as 64 lowercase hex digits (how a cassette writes it).
    pub fn hex(&self) -> String {
        crate::model_store::hex(&self.0)
    }

    /// The key [`hex`](Key::hex) wrote; None for anything but 64 lowercase hex digits.
    pub fn from_hex(text: &str) -> Option<Key> {
        let digits = text.as_bytes();
        if digits.len() != 64
            || !digits
                .iter()
                .all(|d| matches!(d, b'0'..=b'9' | b'a'..=b'f'))
        {
            return None;
        }
        let mut key = [0u8; 32];
        for (byte, pair) in key.iter_mut().zip(digits.chunks_exact(2)) {
            let pair = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(Key(key))
    }
}

/// The hash state after a key's version, `kind` and `parts`: a key is this state finalised, or
/// with more parts fed first.
fn hasher(kind: &str, parts: &[&dyn erased::Part]) -> Sha256 {
    let mut hasher = Sha256::new();
    hasher.update(KEY_VERSION);
    hasher.update([0]);
    hasher.update(kind.as_bytes());
    for part in parts {
        hasher.update([0]);
        part.feed(&mut hasher);
    }
    hasher
}

/// The keys of one engine's model calls: the engine's identity (its settings, and the SHA-256
/// of its model file when it has one) and the request. The part every call shares is hashed
/// once, so a call hashes only its request; a key is the same as
/// `Key::of("call", &[engine, request])`.
#[derive(Clone)]
pub struct CallKeys(Sha256);

impl CallKeys {
    pub fn new(engine: &Value) -> Self {
        CallKeys(hasher("call", &[engine]))
    }

    /// The key of `request`. A candidate or sample number counts only for a sampled call
    /// (temperature above 0): greedy candidates are the same answer.
    pub fn key(&self, request: &Request) -> Key {
        let mut hasher = self.0.clone();
        hasher.update([0]);
        let sampled = request.temperature.is_some_and(|t| t > 0.0);
        if sampled || (request.candidate.is_none() && request.sample.is_none()) {
            erased::Part::feed(request, &mut hasher);
        } else {
            let greedy = Request {
                candidate: None,
                sample: None,
                ..request.clone()
            };
            erased::Part::feed(&greedy, &mut hasher);
        }
        Key(hasher.finalize().into())
    }
}

/// Serialisable parts of a key, usable as trait objects.
pub mod erased {
    use super::*;

    /// Something that can be fed to a key's hash as JSON.
    pub trait Part {
        fn feed(&self, hasher: &mut Sha256);
    }

    impl<T: Serialize> Part for T {
        fn feed(&self, hasher: &mut Sha256) {
            // Serialised whole, then hashed in one piece (much faster than many small updates).
            // Plain data always serialises; a part that could not (a map with non-string keys)
            // would hash as empty, which only makes the key coarser.
            hasher.update(serde_json::to_vec(self).unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Message;
    use serde_json::json;

    fn request(text: &str) -> Request {
        Request {
            messages: vec![Message::user(text)],
            ..Request::default()
        }
    }

    #[test]
    fn a_call_key_is_the_key_of_its_engine_and_request() {
        let engine = json!({ "engine": "scripted", "settings": { "n": 1 } });
        let request = Request {
            max_tokens: Some(5),
            ..request("hi")
        };
        assert_eq!(
            CallKeys::new(&engine).key(&request),
            Key::of("call", &[&engine, &request])
        );
    }

    #[test]
    fn every_part_of_a_call_changes_its_key() {
        let engine = json!({ "engine": "scripted" });
        let keys = CallKeys::new(&engine);
        let base = keys.key(&request("hi"));
        assert_eq!(base, keys.key(&request("hi")));
        let changed = [
            CallKeys::new(&json!({ "engine": "other" })).key(&request("hi")),
            keys.key(&request("hi!")),
            keys.key(&Request {
                max_tokens: Some(5),
                ..request("hi")
            }),
            keys.key(&Request {
                seed: Some(1),
                ..request("hi")
            }),
            keys.key(&Request {
                json_schema: Some(json!({ "type": "object" })),
                ..request("hi")
            }),
            keys.key(&Request {
                temperature: Some(0.7),
                ..request("hi")
            }),
        ];
        for key in changed {
            assert_ne!(key, base);
        }
        assert_ne!(Key::of("embedding", &[&"hi"]), Key::of("score", &[&"hi"]));
    }

    #[test]
    fn a_key_reads_back_from_its_hex_and_nothing_else_does() {
        let key = Key::of("call", &[&"question"]);
        assert_eq!(key.hex().len(), 64);
        assert_eq!(Key::from_hex(&key.hex()), Some(key));
        for bad in [
            "",
            "ab",
            &key.hex().to_uppercase(),
            &format!("{}0", key.hex()),
        ] {
            assert_eq!(Key::from_hex(bad), None, "{bad}");
        }
        assert_eq!(Key::from_hex(&"g".repeat(64)), None);
    }

    #[test]
    fn the_candidate_number_counts_only_for_sampled_calls() {
        let keys = CallKeys::new(&json!({ "engine": "scripted" }));
        let candidate = |n, temperature| {
            keys.key(&Request {
                candidate: Some(n),
                temperature,
                ..request("hi")
            })
        };
        assert_eq!(candidate(1, Some(0.0)), candidate(2, Some(0.0)));
        assert_eq!(candidate(1, None), keys.key(&request("hi")));
        assert_ne!(candidate(1, Some(0.7)), candidate(2, Some(0.7)));
    }
}
