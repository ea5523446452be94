//! `rate_limiter.prune()`: housekeeping. Deletes the state rows that change
//! no later answer, and optionally old rows of names without a definition
//! (`local::prune` says which and how; on a distributed install every node
//! prunes its own shards).

use crate::errors::report;
use crate::placement;
use pgrx::prelude::*;

/// `rate_limiter.prune(older_than)`: how many rows were deleted. See
/// sql/functions.sql.
#[pg_extern(sql = false)]
fn prune(older_than: Option<Interval>) -> i64 {
    match placement::prune(older_than) {
        Ok(deleted) => deleted,
        Err(error) => report(error),
    }
}
