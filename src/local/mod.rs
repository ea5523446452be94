//! The single-server path: each call made on this node's rows, through
//! `storage`. On one server every call ends here; on a distributed install
//! the cluster layer (`crate::placement`) routes storage to the shard
//! relation of this node that holds the rows and runs the same functions.

pub mod all_or_nothing;
pub mod consume;
pub mod credit;
pub mod define;
pub mod prune;
pub mod status;
