//! Storage of rate-limit state: one row of `rate_limiter.rate_limits` per
//! (name, key, shard), read and written inside the caller's transaction,
//! in the relation the caller names (its [`Target`]: the state table, or
//! one standing in for it).
//!
//! - [`consume`] (`rate_limit`): lock, decide and write one row directly on
//!   the heap and the indexes, as `INSERT ... ON CONFLICT DO UPDATE` would
//!   (`consume.rs` says how);
//! - [`consume_sharded`] (`rate_limit` of a limit with several shards):
//!   which shards to look at, lock and write (`shards.rs` says how);
//! - [`consume_all_or_nothing`] (`rate_limit_all`): every row of several
//!   limits locked in one order, then all consumptions written or none
//!   (`all_or_nothing.rs`);
//! - [`credit`] (`rate_credit`);
//! - [`read`], [`read_shards`] (`rate_check`, `status`): look the row(s)
//!   up with the caller's snapshot, taking no lock (`read.rs`);
//! - [`delete`] (`rate_reset`): a kept `DELETE` through SPI (`delete.rs`);
//! - [`take_free_slot`] (`acquire`): a concurrency limit's free slot row
//!   locked, as `FOR UPDATE SKIP LOCKED` would (`slots.rs`).
//!
//! Below them: `layout.rs` (rows, columns, datums), `target.rs` (where a
//! call's rows are stored), `shard_places.rs` (where each shard of a call is),
//! `relations.rs` (opening the table and its indexes, and the index
//! entries of a write), `shape.rs` (the fail-closed checks that the table
//! still has the shape the direct writes assume), `lookup.rs` (index
//! scans), `rows.rs` (the row primitives: peek, find and lock, update in
//! place), `insert.rs` (the speculative insert), `committed.rs` (reads
//! without a lock and REPEATABLE READ's checks), `shard_attempt.rs` (one
//! attempt of a sharded call, step by step), `scan_keys.rs`;
//! `crate::compat` holds what differs between PostgreSQL 15, 16, 17 and
//! 18.

mod all_or_nothing;
mod committed;
mod consume;
mod credit;
mod delete;
mod insert;
mod layout;
mod lookup;
mod read;
pub mod read_cache;
mod relations;
mod rows;
mod scan_keys;
mod shape;
mod shard_attempt;
mod shard_places;
mod shards;
mod slots;
pub mod target;

pub use all_or_nothing::{consume_all_or_nothing, sort_rows};
pub use consume::consume;
pub use credit::credit;
pub use delete::{delete, text_argument};
pub use layout::{timestamp, LimitRows, RowId};
pub use read::{read, read_shards};
pub use shard_places::ShardPlaces;
pub use shards::consume_sharded;
pub use slots::take_free_slot;
pub use target::{StandIn, Target};
