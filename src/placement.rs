//! The placement seam: where a call's rows live, decided once per call.
//!
//! Every SQL function that reads or writes state asks this module, and
//! nothing else, where to go. On one server (the state table is not
//! distributed) every call goes to the single-server path, [`crate::local`],
//! and nothing here or below it knows about clusters. When
//! `rate_limiter.distribute()` has made the state table a distributed one
//! ([`crate::catalog::Objects::distributed`]), the call goes to the
//! [`Cluster`] installed at load (`crate::citus` installs itself from
//! `_PG_init`, as statistics and the planner checks install their hooks):
//! it finds the node holding the rows and either runs the same
//! single-server functions there, with storage routed to the shard
//! relation (`storage::route`), or passes the call on to that node.
//!
//! The order of checks a consuming call makes on a cluster is kept in one
//! place ([`writing`]): first what the cluster refuses before anything is
//! read (inside one of Citus's shard queries nothing else may run first),
//! then 42704 for an undefined limit, then 25006 in a read-only
//! transaction, before the call goes anywhere (another node's part of the
//! transaction would not be read-only: docs/guarantees.md, "Citus",
//! "Transactions across nodes").

use crate::call::{Answers, Call, RequestArgument};
use crate::catalog;
use crate::config::ConfigValues;
use crate::definitions::{self, Definition};
use crate::errors::{CallError, ClusterError};
use crate::local;
use crate::stats::Counted;
use crate::storage::{ShardPlaces, Target};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use rate_limiter_algorithm::{Config, Decision, State};
use std::cell::Cell;
use std::ffi::CStr;

/// A cluster the state table can be distributed over: what each call does
/// when the rows may live on other nodes. The calls get their arguments
/// checked and, for consuming calls, the checks of [`writing`] made.
pub trait Cluster {
    /// Fails when a call named `function` cannot run at this point at all
    /// (before it reads anything, even a definition).
    fn before_call(&self, function: &'static str) -> Result<(), CallError>;
    /// Fails when the cluster cannot serve calls now (before a read-only
    /// call reads anything).
    fn usable(&self) -> Result<(), CallError>;
    /// Fails when an override written now would not reach every node's
    /// calls (before `override` or `remove_override` writes).
    fn before_override(&self) -> Result<(), CallError>;
    /// Fails when a block written now would not refuse every node's calls
    /// (before `block` or `unblock` writes; `global`: the name, for a
    /// block of its global limit), or automatic blocks would not (before
    /// `define` or `override` writes a config with them).
    fn before_block(&self, global: Option<&[u8]>) -> Result<(), CallError>;
    /// The value of the blocks' extra column for (`name`, `key`): a datum
    /// of the type, in the call's memory context (`block` and `unblock`
    /// name their row by it).
    fn blocks_extra(
        &self,
        name: &[u8],
        key: Option<&[u8]>,
    ) -> Result<(pg_sys::Datum, pg_sys::Oid), CallError>;
    /// `rate_limit`: the decision as answered and as counted.
    fn consume(&self, call: &Call<'_>) -> Result<(Decision, Counted), CallError>;
    /// `rate_check`: the decision as answered.
    fn check(&self, call: &Call<'_>) -> Result<Decision, CallError>;
    /// `rate_credit`: the limit's value afterwards. `config_argument` is
    /// the inline config as its SQL value (a `rate_limiter.config`
    /// datum), to pass on.
    fn credit(
        &self,
        name: &[u8],
        key: Option<&[u8]>,
        count: f64,
        inline: Option<Config>,
        config_argument: Option<pg_sys::Datum>,
    ) -> Result<f64, CallError>;
    /// The stored state of every shard of (name, key) (`status`).
    fn read_states(
        &self,
        name: &[u8],
        key: Option<&[u8]>,
        config: &Config,
    ) -> Result<Vec<Option<State>>, CallError>;
    /// One try of `rate_limit_all` (see [`consume_all`]).
    fn consume_all(
        &self,
        requests: &[&RequestArgument],
        reserve: bool,
    ) -> Result<Answers, CallError>;
    /// `prune`: how many rows were deleted on every node.
    fn prune(&self, older_than: Option<Interval>) -> Result<i64, CallError>;
    /// `define`: writes the definition of `name`, and deletes its state
    /// when its meaning changes, through `client` (as the extension's
    /// owner).
    fn define(
        &self,
        client: &mut SpiClient<'_>,
        name: &[u8],
        values: &ConfigValues,
        enforce: bool,
    ) -> Result<(), CallError>;
}

thread_local! {
    /// The cluster installed at load, if any.
    static CLUSTER: Cell<Option<&'static dyn Cluster>> = const { Cell::new(None) };
}

/// Installs `cluster` (once, when the library is loaded).
pub fn install(cluster: &'static dyn Cluster) {
    CLUSTER.with(|cell| cell.set(Some(cluster)));
}

/// The cluster a call goes through: `None` on one server (the state table
/// is not distributed).
///
/// Errors: 55000 when the table is distributed but no cluster is installed.
fn cluster() -> Result<Option<&'static dyn Cluster>, CallError> {
    if !catalog::objects().elsewhere {
        return Ok(None);
    }
    match CLUSTER.with(Cell::get) {
        Some(cluster) => Ok(Some(cluster)),
        None => Err(CallError::Cluster(Box::new(NoCluster))),
    }
}

/// The state table is distributed, but no cluster was installed at load
/// (SQLSTATE 55000).
#[derive(Debug)]
struct NoCluster;

impl ClusterError for NoCluster {
    fn parts(&self) -> (PgSqlErrorCode, String, Option<String>) {
        (
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "rate_limiter.rate_limits is distributed, but this server cannot place calls on a cluster".to_string(),
            Some("Install the library with the same version on every node.".to_string()),
        )
    }
}

/// The name of `function` as messages show it.
fn named(function: &'static CStr) -> &'static str {
    function.to_str().unwrap_or("rate_limiter")
}

/// Fails with 25006 in a read-only transaction.
fn prevent_read_only(function: &'static CStr) {
    // SAFETY: reads the transaction state; raises an ERROR when read-only.
    unsafe { pg_sys::PreventCommandIfReadOnly(function.as_ptr()) };
}

/// The checks of a consuming call on a cluster, in order: the cluster's
/// own (before anything is read), `resolve` (42704 for an undefined
/// limit), 25006 in a read-only transaction.
fn writing(
    cluster: &dyn Cluster,
    function: &'static CStr,
    resolve: impl FnOnce() -> Result<(), CallError>,
) -> Result<(), CallError> {
    cluster.before_call(named(function))?;
    resolve()?;
    prevent_read_only(function);
    Ok(())
}

/// What a call named `function` that reads or writes no state row
/// directly (`rate_reset`) must check first.
pub fn before_call(function: &'static CStr) -> Result<(), CallError> {
    match cluster()? {
        Some(cluster) => cluster.before_call(named(function)),
        None => Ok(()),
    }
}

/// What `override` and `remove_override` check before they write: on a
/// distributed install, that every node reads the overrides.
pub fn before_override() -> Result<(), CallError> {
    match cluster()? {
        Some(cluster) => cluster.before_override(),
        None => Ok(()),
    }
}

/// What `block` and `unblock` of (`name`, `key`) check before they
/// write, and `define` and `override` of a config with automatic blocks
/// (`key` `Some`) (docs/blocks.md, "Citus").
pub fn before_block(name: &[u8], key: Option<&[u8]>) -> Result<(), CallError> {
    match cluster()? {
        Some(cluster) => cluster.before_block(key.is_none().then_some(name)),
        None => Ok(()),
    }
}

/// The value of the blocks' extra column for (`name`, `key`) on a cluster,
/// as a statement's argument (`block` and `unblock` name their row by
/// it); on one server none.
pub fn blocks_extra(
    name: &[u8],
    key: Option<&[u8]>,
) -> Result<Option<pgrx::datum::DatumWithOid<'static>>, CallError> {
    match cluster()? {
        Some(cluster) => {
            let (datum, type_id) = cluster.blocks_extra(name, key)?;
            // SAFETY: a datum of that type, alive for the call.
            Ok(Some(unsafe {
                pgrx::datum::DatumWithOid::new(datum, type_id)
            }))
        }
        None => Ok(None),
    }
}

/// What a read-only call must check before it reads a definition
/// (`status`, `http_headers`).
pub fn before_read() -> Result<(), CallError> {
    match cluster()? {
        Some(cluster) => cluster.usable(),
        None => Ok(()),
    }
}

/// `rate_limit` (and each try of `rate_wait`): locks, decides and writes
/// where the rows live. The decision as answered and as counted.
pub fn consume(call: &Call<'_>) -> Result<(Decision, Counted), CallError> {
    match cluster()? {
        None => local::consume::consume(call, ShardPlaces::STATE_TABLE),
        Some(cluster) => {
            writing(cluster, c"rate_limit()", || call.definition().map(drop))?;
            cluster.consume(call)
        }
    }
}

/// `rate_check`: decides without a lock or a write where the rows live.
pub fn check(call: &Call<'_>) -> Result<Decision, CallError> {
    match cluster()? {
        None => local::consume::check(call, Target::StateTable),
        Some(cluster) => {
            cluster.usable()?;
            // The name is resolved here first, as a consuming call's is:
            // an undefined name (or a composite's) is answered on this
            // node, not passed on.
            call.definition().map(drop)?;
            cluster.check(call)
        }
    }
}

/// `rate_credit`, its arguments checked: the limit's value afterwards.
pub fn credit(
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    inline: Option<Config>,
    config_argument: Option<pg_sys::Datum>,
) -> Result<f64, CallError> {
    match cluster()? {
        None => local::credit::credit(name, key, count, inline, ShardPlaces::STATE_TABLE),
        Some(cluster) => {
            writing(cluster, c"rate_credit()", || {
                definitions::resolve(name, key, inline).map(drop)
            })?;
            cluster.credit(name, key, count, inline, config_argument)
        }
    }
}

/// The stored state of every shard of (name, key) under `definition`,
/// read without a lock where the rows live.
pub fn read_states(
    name: &[u8],
    key: Option<&[u8]>,
    definition: &Definition,
) -> Result<Vec<Option<State>>, CallError> {
    match cluster()? {
        None => Ok(local::status::read_states(
            name,
            key,
            definition,
            Target::StateTable,
        )),
        Some(cluster) => cluster.read_states(name, key, &definition.config),
    }
}

/// `rate_limit_all`: the requests `read` returns (read after the
/// cluster's first check, before 25006), consumed all or nothing where
/// their rows live, again with every definition resolved anew when one
/// changed under the call. The requests (as last resolved) and the
/// answers.
pub fn consume_all(
    function: &'static CStr,
    read: impl FnOnce() -> Result<Vec<RequestArgument>, CallError>,
    reserve: bool,
) -> Result<(Vec<RequestArgument>, Answers), CallError> {
    before_call(function)?;
    let mut requests = read()?;
    prevent_read_only(function);
    let answers = local::all_or_nothing::restarting(&mut requests, |requests| match cluster()? {
        None => local::all_or_nothing::consume(requests, reserve, Target::StateTable),
        Some(cluster) => cluster.consume_all(requests, reserve),
    })?;
    local::all_or_nothing::strike_used_up(&requests, &answers.0)?;
    if cluster()?.is_some() {
        // A request refused on another node for its key's block: the
        // block is read there, for the statistics and the DETAIL.
        let now = crate::clock::now();
        for (request, answer) in requests.iter_mut().zip(&answers.0) {
            if answer.verdict == rate_limiter_algorithm::Verdict::Refused
                && request.blocked_until.is_none()
            {
                if let Some(block) =
                    crate::blocks::find_anywhere(&request.name, request.key.as_deref())?
                {
                    request.blocked_until = (block.until > now).then_some(block.until);
                }
            }
        }
    }
    Ok((requests, answers))
}

/// `prune`: how many rows were deleted (on a cluster, on every node).
pub fn prune(older_than: Option<Interval>) -> Result<i64, CallError> {
    match cluster()? {
        None => local::prune::prune_state_table(older_than),
        Some(cluster) => cluster.prune(older_than),
    }
}

/// `define`, its arguments checked: writes the definition (on one server
/// `local::define`) through `client`, as the extension's owner.
pub fn define(
    client: &mut SpiClient<'_>,
    name: &[u8],
    values: &ConfigValues,
    enforce: bool,
) -> Result<(), CallError> {
    match cluster()? {
        None => local::define::define(client, name, values, enforce),
        Some(cluster) => cluster.define(client, name, values, enforce),
    }
}
