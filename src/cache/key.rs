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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(pub [u8; 32]);

impl Key {
    /// The key of an entry of `kind` decided by `parts` (each serialised as JSON).
    pub fn of(kind: &str, parts: &[&dyn erased::Part]) -> Key {
        let mut hasher = Sha256::new();
        hasher.update(KEY_VERSION);
        hasher.update([0]);
        hasher.update(kind.as_bytes());
        for part in parts {
            hasher.update([0]);
            part.feed(&mut hasher);
        }
        Key(hasher.finalize().into())
    }

    /// The key of a model call: the engine's identity (`engine`: its settings, and the SHA-256
    /// of its model file when it has one) and the request. A candidate number counts only for a
    /// sampled call (temperature above 0): greedy candidates are the same answer.
    pub fn of_call(engine: &Value, request: &Request) -> Key {
        let sampled = request.temperature.is_some_and(|t| t > 0.0);
        if sampled || request.candidate.is_none() {
            Key::of("call", &[engine, request])
        } else {
            let request = Request {
                candidate: None,
                ..request.clone()
            };
            Key::of("call", &[engine, &request])
        }
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
    fn every_part_of_a_call_changes_its_key() {
        let engine = json!({ "engine": "scripted" });
        let base = Key::of_call(&engine, &request("hi"));
        assert_eq!(base, Key::of_call(&engine, &request("hi")));
        let changed = [
            Key::of_call(&json!({ "engine": "other" }), &request("hi")),
            Key::of_call(&engine, &request("hi!")),
            Key::of_call(
                &engine,
                &Request {
                    max_tokens: Some(5),
                    ..request("hi")
                },
            ),
            Key::of_call(
                &engine,
                &Request {
                    seed: Some(1),
                    ..request("hi")
                },
            ),
            Key::of_call(
                &engine,
                &Request {
                    json_schema: Some(json!({ "type": "object" })),
                    ..request("hi")
                },
            ),
            Key::of_call(
                &engine,
                &Request {
                    temperature: Some(0.7),
                    ..request("hi")
                },
            ),
        ];
        for key in changed {
            assert_ne!(key, base);
        }
        assert_ne!(Key::of("embedding", &[&"hi"]), Key::of("score", &[&"hi"]));
    }

    #[test]
    fn the_candidate_number_counts_only_for_sampled_calls() {
        let engine = json!({ "engine": "scripted" });
        let candidate = |n, temperature| {
            Key::of_call(
                &engine,
                &Request {
                    candidate: Some(n),
                    temperature,
                    ..request("hi")
                },
            )
        };
        assert_eq!(candidate(1, Some(0.0)), candidate(2, Some(0.0)));
        assert_eq!(candidate(1, None), Key::of_call(&engine, &request("hi")));
        assert_ne!(candidate(1, Some(0.7)), candidate(2, Some(0.7)));
    }
}
