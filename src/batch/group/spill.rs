//! Where `--group-by` keeps the rows while it groups them: a temporary SQLite database on disk,
//! so grouping never holds the input in memory.
//!
//! Every row is appended, in input order, to one table as `(group, position, row JSON)` — its
//! group's number (groups are numbered as they first appear) and its place in that group — inside
//! one transaction, with journaling off (the database is scratch: a crash throws it away, and a
//! resume groups again). One index on `(group, position)` is built after the last row (one sort,
//! cheaper than keeping an index ordered row by row), and each chunk a reduce run needs is then a
//! range read of that index. SQLite rather than sorted runs written by hand: it is already built
//! (the call cache uses it), its page cache bounds memory by itself, and range reads of any chunk
//! of any group come free, which a fold and a resume (that starts mid-group) both need. What stays
//! in memory is one entry per group (its key and row count), not per row.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, params};
use serde_json::{Map, Value};

use super::key::{GroupKey, Key, canonical, shard_of};
use crate::batch::Shard;
use crate::batch::input::Rows;
use crate::core::{Failure, FailureCode};
use crate::prompt::Templates;

/// One group: its key, the key's canonical text (the group's row id) and how many rows it has.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub key: Key,
    pub id: String,
    pub rows: u64,
}

/// The grouped rows; see the module docs.
pub struct Spill {
    connection: Connection,
    /// Removed with the spill.
    _dir: tempfile::TempDir,
    /// In order of first appearance.
    pub groups: Vec<Group>,
    /// Rows read from the input, those of other shards and those skipped included.
    pub rows_read: u64,
    /// Rows without a key, left out (`--skip-missing-key`).
    pub rows_without_key: u64,
}

/// Which rows the spill takes, and how it finds their keys.
pub struct Grouping<'a> {
    pub key: &'a GroupKey,
    pub shard: Option<&'a Shard>,
    /// Leave rows without a key out, instead of grouping them under `null`.
    pub skip_missing_key: bool,
}

fn spill_failure(e: impl std::fmt::Display) -> Failure {
    Failure::new(
        FailureCode::ConfigFileError,
        format!("cannot group the rows in a temporary database: {e}"),
    )
    .with_help(
        "grouping needs free space in the temporary directory ($TMPDIR) about the input's size",
    )
}

impl Spill {
    /// Reads every row of `rows` into a new spill in `dir` (None: the system's temporary
    /// directory). An unreadable row or a row whose key is not a scalar stops the grouping.
    pub fn fill(rows: Rows, grouping: &Grouping<'_>, dir: Option<&Path>) -> Result<Spill, Failure> {
        let scratch = match dir {
            Some(dir) => tempfile::Builder::new()
                .prefix(".pagantic-group")
                .tempdir_in(dir),
            None => tempfile::Builder::new().prefix("pagantic-group").tempdir(),
        }
        .map_err(spill_failure)?;
        let connection = Connection::open(scratch.path().join("rows.db")).map_err(spill_failure)?;
        connection
            .execute_batch(
                "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA temp_store=FILE;
                 PRAGMA cache_size=-16384;
                 CREATE TABLE rows (grp INTEGER NOT NULL, pos INTEGER NOT NULL, json TEXT NOT NULL);
                 BEGIN;",
            )
            .map_err(spill_failure)?;
        let mut spill = Spill {
            connection,
            _dir: scratch,
            groups: Vec::new(),
            rows_read: 0,
            rows_without_key: 0,
        };
        spill.insert_all(rows, grouping)?;
        spill
            .connection
            .execute_batch("COMMIT; CREATE INDEX rows_by_group ON rows (grp, pos);")
            .map_err(spill_failure)?;
        Ok(spill)
    }

    fn insert_all(&mut self, rows: Rows, grouping: &Grouping<'_>) -> Result<(), Failure> {
        let templates = Templates::new(None);
        let mut numbers: HashMap<String, usize> = HashMap::new();
        let mut insert = self
            .connection
            .prepare("INSERT INTO rows (grp, pos, json) VALUES (?1, ?2, ?3)")
            .map_err(spill_failure)?;
        for row in rows {
            self.rows_read += 1;
            let row = row.map_err(|bad| {
                let mut failure = bad.failure;
                failure.message = format!("row {}: {}", bad.index + 1, failure.message);
                failure
            })?;
            let key = grouping.key.of(&row.data, row.index + 1, &templates)?;
            if key.is_none() && grouping.skip_missing_key {
                self.rows_without_key += 1;
                continue;
            }
            let id = canonical(&key);
            if grouping
                .shard
                .is_some_and(|s| shard_of(&id, s.count) != s.index)
            {
                continue;
            }
            let number = match numbers.get(&id) {
                Some(&number) => number,
                None => {
                    numbers.insert(id.clone(), self.groups.len());
                    self.groups.push(Group { key, id, rows: 0 });
                    self.groups.len() - 1
                }
            };
            let group = &mut self.groups[number];
            let json = Value::Object(row.data).to_string();
            insert
                .execute(params![number as i64, group.rows as i64, json])
                .map_err(spill_failure)?;
            group.rows += 1;
        }
        Ok(())
    }

    /// Rows `from..to` (positions in input order) of group `number`.
    pub fn rows(&self, number: usize, from: u64, to: u64) -> Result<Vec<Value>, Failure> {
        let mut select = self
            .connection
            .prepare_cached(
                "SELECT json FROM rows WHERE grp = ?1 AND pos >= ?2 AND pos < ?3 ORDER BY pos",
            )
            .map_err(spill_failure)?;
        let texts = select
            .query_map(params![number as i64, from as i64, to as i64], |r| {
                r.get::<_, String>(0)
            })
            .map_err(spill_failure)?;
        let mut rows = Vec::with_capacity(to.saturating_sub(from) as usize);
        for text in texts {
            let text = text.map_err(spill_failure)?;
            let row: Map<String, Value> = serde_json::from_str(&text).map_err(spill_failure)?;
            rows.push(Value::Object(row));
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::input::Row;
    use serde_json::json;

    fn rows(values: Vec<Value>) -> Rows {
        Box::new(values.into_iter().enumerate().map(|(index, value)| {
            Ok(Row {
                index,
                id: (index + 1).to_string(),
                data: value.as_object().cloned().expect("an object"),
            })
        }))
    }

    /// The rows of `values` grouped by `product`.
    fn by_product(
        values: Vec<Value>,
        skip_missing_key: bool,
        shard: Option<&Shard>,
    ) -> Result<Spill, Failure> {
        let key = GroupKey::parse("product").expect("a path");
        let grouping = Grouping {
            key: &key,
            shard,
            skip_missing_key,
        };
        Spill::fill(rows(values), &grouping, None)
    }

    fn products() -> Vec<Value> {
        vec![
            json!({ "product": "b", "n": 0 }),
            json!({ "product": "a", "n": 1 }),
            json!({ "n": 2 }),
            json!({ "product": "b", "n": 3 }),
            json!({ "product": 7, "n": 4 }),
            json!({ "product": "b", "n": 5 }),
        ]
    }

    #[test]
    fn groups_keep_first_appearance_order_and_rows_keep_input_order() {
        let spill = by_product(products(), false, None).expect("grouped");
        let ids: Vec<(&str, u64)> = spill
            .groups
            .iter()
            .map(|g| (g.id.as_str(), g.rows))
            .collect();
        assert_eq!(ids, [("\"b\"", 3), ("\"a\"", 1), ("null", 1), ("7", 1)]);
        let ns = |rows: Vec<Value>| {
            rows.iter()
                .map(|r| r["n"].as_u64().unwrap_or(99))
                .collect::<Vec<_>>()
        };
        assert_eq!(ns(spill.rows(0, 0, 3).expect("rows")), [0, 3, 5]);
        assert_eq!(
            ns(spill.rows(0, 1, 3).expect("rows")),
            [3, 5],
            "a chunk from the middle"
        );
        assert_eq!(spill.rows_read, 6);
    }

    #[test]
    fn rows_without_a_key_can_be_skipped_and_shards_split_groups_whole() {
        let spill = by_product(products(), true, None).expect("grouped");
        assert_eq!(spill.groups.len(), 3);
        assert_eq!(spill.rows_without_key, 1);
        let mut seen = Vec::new();
        for index in 0..3 {
            let shard = Shard {
                index,
                count: 3,
                from: None,
            };
            let part = by_product(products(), false, Some(&shard)).expect("grouped");
            seen.extend(part.groups.into_iter().map(|g| (g.id, g.rows)));
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                ("\"a\"".to_string(), 1),
                ("\"b\"".to_string(), 3),
                ("7".to_string(), 1),
                ("null".to_string(), 1)
            ],
            "every group in exactly one shard, whole"
        );
    }

    #[test]
    fn a_row_with_an_object_key_stops_the_grouping_with_its_number() {
        let bad = vec![json!({ "product": "a" }), json!({ "product": { "id": 1 } })];
        let failure = by_product(bad, false, None).err().expect("refused");
        assert!(
            failure
                .message
                .starts_with("row 2: the group key `product` is an object"),
            "{}",
            failure.message
        );
    }
}
