//! Folding a group too big for one prompt: its rows are reduced in chunks of `--fold N`, the
//! chunks' results (partial results) are reduced again in chunks of N, and so on until one run
//! reduces what is left — the group's result. Each run is told its `fold_level`: 0 for runs over
//! the group's rows, 1 and up for runs over partial results.
//!
//! [`Fold`] is one group's progress through its levels: which chunk runs next, which results are
//! in, when the next level can start. Chunks restored from an earlier, interrupted run (`--resume`)
//! count as finished and are never handed out again.

use std::collections::HashMap;

use serde_json::Value;

/// One run of the reduce plan: `level`'s chunk `index`, over items `from..to` of that level (rows
/// of the group at level 0, partial results above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub level: u32,
    pub index: u64,
    pub from: u64,
    pub to: u64,
}

/// How many runs each level of a group of `rows` rows takes, folding by `size` (None: one run
/// over every row). A group of 1,000 rows at `--fold 50`: `[20, 1]`.
pub fn runs_per_level(rows: u64, size: Option<u64>) -> Vec<u64> {
    let Some(size) = size.filter(|&s| s >= 2) else {
        return vec![1];
    };
    let mut levels = vec![rows.div_ceil(size).max(1)];
    while let Some(&last) = levels.last()
        && last > 1
    {
        levels.push(last.div_ceil(size));
    }
    levels
}

/// One group's way through its fold; see the module docs.
#[derive(Debug)]
pub struct Fold {
    size: Option<u64>,
    level: u32,
    /// Items at this level: the group's rows at level 0, else the results of the level below.
    items: u64,
    /// The results of the level below: this level's items (empty at level 0).
    below: Vec<Value>,
    /// This level's results so far, one per chunk.
    results: Vec<Option<Value>>,
    next: u64,
    /// Results of chunks an earlier run finished, by (level, chunk).
    restored: HashMap<(u32, u64), Value>,
}

impl Fold {
    pub fn new(rows: u64, size: Option<u64>, restored: HashMap<(u32, u64), Value>) -> Fold {
        let mut fold = Fold {
            size,
            level: 0,
            items: rows,
            below: Vec::new(),
            results: Vec::new(),
            next: 0,
            restored,
        };
        fold.start_level();
        fold
    }

    fn chunk_count(&self) -> u64 {
        match self.size {
            Some(size) if size >= 2 => self.items.div_ceil(size).max(1),
            _ => 1,
        }
    }

    /// Whether `level` is the last: its one run gives the group's result.
    pub fn is_last(&self, level: u32) -> bool {
        level == self.level && self.chunk_count() == 1
    }

    fn start_level(&mut self) {
        let chunks = self.chunk_count();
        let level = self.level;
        self.results = (0..chunks)
            .map(|index| self.restored.remove(&(level, index)))
            .collect();
        self.next = 0;
    }

    /// The next chunk to run, or None while the chunks handed out are still running (or the
    /// fold is done). Moves on to the next level once every result of this one is in.
    pub fn next_chunk(&mut self) -> Option<Chunk> {
        loop {
            while (self.next as usize) < self.results.len() {
                let index = self.next;
                self.next += 1;
                if self.results[index as usize].is_none() {
                    let size = match self.size {
                        Some(size) if size >= 2 => size,
                        _ => self.items.max(1),
                    };
                    return Some(Chunk {
                        level: self.level,
                        index,
                        from: index * size,
                        to: ((index + 1) * size).min(self.items),
                    });
                }
            }
            if !self.advance() {
                return None;
            }
        }
    }

    /// Starts the next level when every result of this one is in and there is more than one.
    fn advance(&mut self) -> bool {
        if self.results.len() < 2 || self.results.iter().any(Option::is_none) {
            return false;
        }
        self.below = self.results.drain(..).flatten().collect();
        self.items = self.below.len() as u64;
        self.level += 1;
        self.start_level();
        true
    }

    /// Records the result of a chunk of the current level.
    pub fn finish(&mut self, chunk: Chunk, output: Value) {
        if chunk.level == self.level
            && let Some(slot) = self.results.get_mut(chunk.index as usize)
        {
            *slot = Some(output);
        }
    }

    /// The partial results a chunk above level 0 reduces.
    pub fn partials(&self, chunk: Chunk) -> Vec<Value> {
        let (from, to) = (
            chunk.from as usize,
            (chunk.to as usize).min(self.below.len()),
        );
        self.below
            .get(from..to)
            .map(<[Value]>::to_vec)
            .unwrap_or_default()
    }

    /// How many levels this group's fold has had so far (1 for a group reduced in one run).
    pub fn levels(&self) -> u32 {
        self.level + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_thousand_rows_at_fold_fifty_take_twenty_runs_then_one() {
        assert_eq!(runs_per_level(1_000, Some(50)), [20, 1]);
        assert_eq!(runs_per_level(1_000, None), [1]);
        assert_eq!(runs_per_level(50, Some(50)), [1]);
        assert_eq!(runs_per_level(51, Some(50)), [2, 1]);
        assert_eq!(runs_per_level(10_000, Some(10)), [1_000, 100, 10, 1]);
        assert_eq!(runs_per_level(1, Some(2)), [1]);
    }

    /// Runs a whole fold, each run's result the number of items it reduced, summed above level 0.
    fn drive(fold: &mut Fold) -> (Vec<Chunk>, Value) {
        let mut ran = Vec::new();
        loop {
            let mut level = Vec::new();
            while let Some(chunk) = fold.next_chunk() {
                level.push(chunk);
            }
            if level.is_empty() {
                unreachable!("a fold always has a last run");
            }
            for chunk in &level {
                let output = if chunk.level == 0 {
                    json!(chunk.to - chunk.from)
                } else {
                    json!(
                        fold.partials(*chunk)
                            .iter()
                            .filter_map(Value::as_u64)
                            .sum::<u64>()
                    )
                };
                ran.push(*chunk);
                if fold.is_last(chunk.level) {
                    return (ran, output);
                }
                fold.finish(*chunk, output);
            }
        }
    }

    #[test]
    fn levels_follow_one_another_and_every_row_is_counted_once() {
        let mut fold = Fold::new(1_000, Some(50), HashMap::new());
        let (ran, result) = drive(&mut fold);
        assert_eq!(ran.len(), 21);
        assert_eq!(ran.iter().filter(|c| c.level == 0).count(), 20);
        assert_eq!(
            ran[0],
            Chunk {
                level: 0,
                index: 0,
                from: 0,
                to: 50
            }
        );
        assert_eq!(
            ran[20],
            Chunk {
                level: 1,
                index: 0,
                from: 0,
                to: 20
            }
        );
        assert_eq!(result, json!(1_000));
        assert_eq!(fold.levels(), 2);
        let mut uneven = Fold::new(23, Some(5), HashMap::new());
        let (ran, result) = drive(&mut uneven);
        assert_eq!(ran.len(), 5 + 1);
        assert_eq!(
            ran[4],
            Chunk {
                level: 0,
                index: 4,
                from: 20,
                to: 23
            }
        );
        assert_eq!(result, json!(23));
    }

    #[test]
    fn a_level_waits_for_every_chunk_before_the_next_starts() {
        let mut fold = Fold::new(4, Some(2), HashMap::new());
        let first = fold.next_chunk().expect("chunk 0");
        let second = fold.next_chunk().expect("chunk 1");
        assert_eq!(fold.next_chunk(), None, "level 1 waits");
        fold.finish(second, json!("b"));
        assert_eq!(fold.next_chunk(), None, "still waiting for chunk 0");
        fold.finish(first, json!("a"));
        let top = fold.next_chunk().expect("level 1");
        assert_eq!((top.level, top.from, top.to), (1, 0, 2));
        assert_eq!(
            fold.partials(top),
            [json!("a"), json!("b")],
            "in chunk order"
        );
        assert!(fold.is_last(1));
    }

    #[test]
    fn restored_chunks_are_not_run_again() {
        let restored = HashMap::from([((0, 0), json!(50)), ((0, 2), json!(50))]);
        let mut fold = Fold::new(200, Some(50), restored);
        let (ran, result) = drive(&mut fold);
        let level_zero: Vec<u64> = ran
            .iter()
            .filter(|c| c.level == 0)
            .map(|c| c.index)
            .collect();
        assert_eq!(level_zero, [1, 3]);
        assert_eq!(ran.len(), 3);
        assert_eq!(result, json!(200));
        let all_done = HashMap::from([((0, 0), json!(1)), ((0, 1), json!(2))]);
        let mut fold = Fold::new(4, Some(2), all_done);
        let top = fold.next_chunk().expect("straight to level 1");
        assert_eq!(top.level, 1);
        assert_eq!(fold.partials(top), [json!(1), json!(2)]);
    }
}
