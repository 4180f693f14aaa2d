//! What an ONNX scorer computes from content — a passage's embedding, a (query, passage) pair's
//! logit — kept in a [`Memo`] (the call cache) so that a later run computes only what it has not
//! seen: keyed by the scorer's identity (its model file's SHA-256 and the settings that change
//! the value) and the texts, looked up first, computed for the rest, and stored.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::core::{Failure, Memo};

/// A value a scorer can keep in the memo, as text.
pub trait Kept: Sized {
    /// The kind of entry (`cache stats` counts each kind apart).
    const KIND: &'static str;
    fn encode(&self) -> String;
    /// The value [`encode`](Kept::encode) wrote; None for anything else (a damaged entry is
    /// computed again).
    fn decode(text: &str) -> Option<Self>;
}

/// Where a scorer's values outlive the run, and the identity its keys start with.
#[derive(Clone)]
pub struct Remembered {
    memo: Arc<dyn Memo>,
    identity: String,
}

/// Values for a list of inputs, and how many of them the memo held.
pub struct Recalled<T> {
    pub values: Vec<T>,
    pub recalled: usize,
}

impl Remembered {
    /// Values kept in `memo` under keys that start with `identity` (what, besides the texts,
    /// decides a value).
    pub fn new(memo: Arc<dyn Memo>, identity: String) -> Remembered {
        Remembered { memo, identity }
    }

    /// The key of the value computed from `texts`: the identity, then each text after a zero
    /// byte, every text but the last preceded by its length, so that no two lists of texts
    /// share a key (and the key of one text is the SHA-256 of the identity, a zero byte and it).
    fn key(&self, texts: &[&str]) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(self.identity.as_bytes());
        if let Some((last, leading)) = texts.split_last() {
            for text in leading {
                hash.update([0]);
                hash.update((text.len() as u64).to_le_bytes());
                hash.update(text.as_bytes());
            }
            hash.update([0]);
            hash.update(last.as_bytes());
        }
        hash.finalize().into()
    }

    /// One value per entry of `inputs` (each the texts that decide it): those the memo holds,
    /// and for the rest what `compute` returns when given their positions (in order), which is
    /// stored.
    pub fn recall_or_compute<T: Kept>(
        &self,
        inputs: &[Vec<&str>],
        compute: impl FnOnce(&[usize]) -> Result<Vec<T>, Failure>,
    ) -> Result<Recalled<T>, Failure> {
        let keys: Vec<[u8; 32]> = inputs.iter().map(|texts| self.key(texts)).collect();
        let mut found: Vec<Option<T>> = keys
            .iter()
            .map(|key| self.memo.recall(*key).and_then(|text| T::decode(&text)))
            .collect();
        let missing: Vec<usize> = (0..inputs.len()).filter(|i| found[*i].is_none()).collect();
        let recalled = inputs.len() - missing.len();
        let computed = if missing.is_empty() {
            Vec::new()
        } else {
            compute(&missing)?
        };
        for (i, value) in missing.into_iter().zip(computed) {
            self.memo.remember(T::KIND, keys[i], value.encode());
            found[i] = Some(value);
        }
        Ok(Recalled {
            values: found.into_iter().flatten().collect(),
            recalled,
        })
    }
}

/// A pair's score: the bits of the f64, in hex (exact).
impl Kept for f64 {
    const KIND: &'static str = "score";

    fn encode(&self) -> String {
        format!("{:016x}", self.to_bits())
    }

    fn decode(hex: &str) -> Option<f64> {
        (hex.len() == 16)
            .then(|| u64::from_str_radix(hex, 16).ok())
            .flatten()
            .map(f64::from_bits)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A memo that keeps values in memory and counts what it was asked to store, by kind.
    #[derive(Default)]
    pub struct InMemory {
        values: Mutex<HashMap<[u8; 32], String>>,
        stored: AtomicUsize,
        kinds: Mutex<Vec<&'static str>>,
    }

    impl InMemory {
        pub fn stored(&self) -> usize {
            self.stored.load(Ordering::Relaxed)
        }

        pub fn kinds(&self) -> Vec<&'static str> {
            self.kinds.lock().map(|k| k.clone()).unwrap_or_default()
        }
    }

    impl Memo for InMemory {
        fn recall(&self, key: [u8; 32]) -> Option<String> {
            self.values.lock().ok()?.get(&key).cloned()
        }
        fn remember(&self, kind: &'static str, key: [u8; 32], value: String) {
            self.stored.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut kinds) = self.kinds.lock() {
                kinds.push(kind);
            }
            if let Ok(mut kept) = self.values.lock() {
                kept.insert(key, value);
            }
        }
        fn file_sha256(&self, _: &std::path::Path) -> Option<String> {
            None
        }
    }

    #[test]
    fn scores_round_trip_exactly_and_damaged_entries_are_refused() {
        for score in [0.0, -0.0, 0.731_058_578_630_004_9, f64::MAX, -3.25] {
            let back = f64::decode(&score.encode()).expect("decodes");
            assert_eq!(back.to_bits(), score.to_bits());
        }
        assert_eq!(f64::decode("3ff0"), None);
        assert_eq!(f64::decode("zzzzzzzzzzzzzzzz"), None);
    }

    #[test]
    fn keys_depend_on_the_identity_and_on_how_the_texts_are_split() {
        let memo: Arc<dyn Memo> = Arc::new(InMemory::default());
        let a = Remembered::new(Arc::clone(&memo), "a".into());
        let b = Remembered::new(memo, "b".into());
        assert_eq!(a.key(&["q", "p"]), a.key(&["q", "p"]));
        assert_ne!(a.key(&["q", "p"]), b.key(&["q", "p"]));
        assert_ne!(a.key(&["q\0", "p"]), a.key(&["q", "\0p"]));
        assert_ne!(a.key(&["qp"]), a.key(&["q", "p"]));
        let one: [u8; 32] = Sha256::digest(b"a\0text").into();
        assert_eq!(a.key(&["text"]), one, "the key of one text");
    }

    #[test]
    fn only_what_the_memo_lacks_is_computed_and_then_kept() {
        let memo = Arc::new(InMemory::default());
        let remembered = Remembered::new(Arc::clone(&memo) as Arc<dyn Memo>, "m".into());
        let asked = Mutex::new(Vec::new());
        let run = |texts: &[&str]| {
            let inputs: Vec<Vec<&str>> = texts.iter().map(|t| vec!["q", *t]).collect();
            let got = remembered
                .recall_or_compute::<f64>(&inputs, |missing| {
                    asked.lock().expect("lock").push(missing.to_vec());
                    Ok(missing.iter().map(|i| inputs[*i][1].len() as f64).collect())
                })
                .expect("computed");
            (got.values, got.recalled)
        };
        assert_eq!(run(&["a", "bb"]), (vec![1.0, 2.0], 0));
        assert_eq!(run(&["bb", "ccc", "a"]), (vec![2.0, 3.0, 1.0], 2));
        assert_eq!(run(&["bb", "ccc", "a"]), (vec![2.0, 3.0, 1.0], 3));
        assert_eq!(
            *asked.lock().expect("lock"),
            [vec![0, 1], vec![1]],
            "nothing computed when all were kept"
        );
        assert_eq!(memo.kinds(), ["score", "score", "score"]);
    }
}
