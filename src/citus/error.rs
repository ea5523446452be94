//! The errors of a call on a distributed install (docs/guarantees.md,
//! "Citus"), raised through the one `CallError::Cluster` of
//! `crate::errors`.

use crate::errors::{CallError, ClusterError};
use crate::names;
use pgrx::PgSqlErrorCode;

/// Why a call cannot be made on this cluster as asked.
#[derive(Debug)]
pub(crate) enum Error {
    /// The call cannot be made where it is made, or the tables are not
    /// distributed the way the limiter needs (SQLSTATE 55000); a message
    /// and a hint that says what to do.
    Unusable(String, &'static str),
    /// The state table is distributed, and a call reached this node's own
    /// copy of it instead of one of its shards (SQLSTATE 55000).
    NotRouted,
    /// Something this version does not do on a distributed install yet
    /// (SQLSTATE 0A000); the message says what.
    NotOnCluster(&'static str),
    /// The state is colocated with a table distributed by a bigint column,
    /// and this key (bytes) is not a decimal integer (SQLSTATE 22P02).
    KeyNotBigInt(Vec<u8>),
    /// The state is colocated with a table distributed by an integer
    /// column, and this key (bytes) is not a decimal integer in its range
    /// (SQLSTATE 22P02).
    KeyNotInteger(Vec<u8>),
    /// The state is colocated with a table distributed by a uuid column,
    /// and this key (bytes) is not a uuid (SQLSTATE 22P02).
    KeyNotUuid(Vec<u8>),
    /// A call that writes (named, e.g. `rate_limit()`) runs inside one of
    /// Citus's per-shard queries, where it would commit apart from the
    /// caller's transaction (SQLSTATE 0A000).
    InsideShardQuery(&'static str),
}

impl From<Error> for CallError {
    fn from(error: Error) -> Self {
        CallError::Cluster(Box::new(error))
    }
}

impl ClusterError for Error {
    fn parts(&self) -> (PgSqlErrorCode, String, Option<String>) {
        match self {
            Error::Unusable(message, hint) => (
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                message.clone(),
                Some(hint.to_string()),
            ),
            Error::NotRouted => (
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "rate_limiter.rate_limits is distributed by Citus, and this call was not routed to one of its shards".to_string(),
                Some("Distribute the tables with rate_limiter.distribute() only (on the coordinator: SELECT rate_limiter.undistribute(); SELECT rate_limiter.distribute();), and retry the transaction.".to_string()),
            ),
            Error::InsideShardQuery(function) => (
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("rate_limiter.{function} cannot run inside a Citus shard query, where it would commit apart from the caller's transaction"),
                Some(format!("Citus pushed the call down into the query it runs for each shard of a distributed table. Call rate_limiter.{function} in a statement of its own, or over rows collected first on this node: WITH t AS MATERIALIZED (SELECT ...) SELECT rate_limiter.{function} ... FROM t.")),
            ),
            Error::NotOnCluster(what) => (
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("{what} is not supported yet when rate_limiter's tables are distributed by Citus"),
                Some("Call SELECT rate_limiter.undistribute() on the coordinator to go back to local tables.".to_string()),
            ),
            Error::KeyNotBigInt(key) => (
                PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
                format!(
                    "key \"{}\" is not a bigint, and rate_limiter.rate_limits is distributed by a bigint column",
                    names::for_message(key)
                ),
                Some("rate_limiter.distribute(colocate_with => ...) colocated the limits with a table distributed by a bigint column: every key must be that table's distribution value, a decimal integer (a global limit's key is NULL).".to_string()),
            ),
            Error::KeyNotInteger(key) => (
                PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
                format!(
                    "key \"{}\" is not an integer, and rate_limiter.rate_limits is distributed by an integer column",
                    names::for_message(key)
                ),
                Some("rate_limiter.distribute(colocate_with => ...) colocated the limits with a table distributed by an integer column: every key must be that table's distribution value, a decimal integer from -2147483648 to 2147483647 (a global limit's key is NULL).".to_string()),
            ),
            Error::KeyNotUuid(key) => (
                PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
                format!(
                    "key \"{}\" is not a uuid, and rate_limiter.rate_limits is distributed by a uuid column",
                    names::for_message(key)
                ),
                Some("rate_limiter.distribute(colocate_with => ...) colocated the limits with a table distributed by a uuid column: every key must be that table's distribution value, a uuid (a global limit's key is NULL).".to_string()),
            ),
        }
    }

    fn detail(&self) -> Option<String> {
        matches!(self, Error::NotRouted).then(|| {
            "The call would read and write the table on this node, which holds no state once it is distributed.".to_string()
        })
    }
}
