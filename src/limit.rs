//! The core SQL functions: `rate_limiter.rate_limit()` (consume),
//! `rate_limiter.rate_check()` (the same answer, no lock, no write) and
//! `rate_limiter.rate_reset()` (forget the state).
//!
//! Order of work in a call: argument checks (NULLs are 22004 before
//! anything is looked up), the config (inline, else the definition, else
//! 42704), the row lock, the clock, the math, the write. Errors are raised
//! only after SPI is finished; a refusal with `throws => true` is raised as
//! the very last step.

use crate::citus;
use crate::clock;
use crate::config::{inline_config, required};
use crate::definitions::{self, Definition};
use crate::errors::{raise_refused, report, CallError};
use crate::result_row::{self, ResultRow};
use crate::security::write_as_owner;
use crate::shard_choice;
use crate::stats::{self, Counted};
use crate::storage::{self, LimitRows, RowId, ShardPlaces};
use pgrx::fcinfo::pg_getarg;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::{
    evaluate, evaluate_all, evaluate_looked_at, near_limit, verdict, Config, Decision, LimitError,
    LimitId, Request, ShardedDecision, Verdict,
};

/// The checked arguments of `rate_limit` / `rate_check`. Names and keys
/// are opaque bytes (see `names`).
pub struct Call<'a> {
    pub name: &'a [u8],
    pub key: Option<&'a [u8]>,
    pub request: Request,
    pub throws: bool,
    /// The inline config, if any.
    pub config: Option<Config>,
    /// The inline config as the SQL value and its type, kept on a
    /// distributed install only (the call may be passed on to the node
    /// holding its row): see [`config_argument`].
    pub config_argument: Option<(pg_sys::Datum, pg_sys::Oid)>,
    /// The SQL function this call is, when SQL called `rate_limit` or
    /// `rate_check` itself: on a distributed install a call that is its
    /// transaction's only work reaches another node in one round trip
    /// (see `citus::single_statement`).
    pub function: Option<pg_sys::Oid>,
}

impl<'a> Call<'a> {
    /// Checks the arguments (22004 for a NULL name, count, reserve or
    /// throws; 22023 for an invalid inline config).
    pub fn new(
        name: Option<&'a [u8]>,
        key: Option<&'a [u8]>,
        count: Option<f64>,
        reserve: Option<bool>,
        throws: Option<bool>,
        config: Option<PgHeapTuple<'_, AllocatedByRust>>,
    ) -> Result<Self, LimitError> {
        let name = required(name, "name")?;
        let count = required(count, "count")?;
        let reserve = required(reserve, "reserve")?;
        let throws = required(throws, "throws")?;
        Ok(Call {
            name,
            key,
            request: Request { count, reserve },
            throws,
            config: inline_config(config)?,
            config_argument: None,
            function: None,
        })
    }

    fn id(&self) -> LimitId<'a> {
        LimitId {
            name: self.name,
            key: self.key,
        }
    }

    fn row(&self) -> RowId<'a> {
        RowId {
            name: self.name,
            key: self.key,
            shard: 0,
        }
    }

    /// The rows of a sharded limit (`config.shards` >= 2, which validation
    /// keeps within `i16`).
    fn shards(&self, config: &Config) -> LimitRows<'a> {
        LimitRows {
            name: self.name,
            key: self.key,
            shards: config.shards as i16,
        }
    }

    /// The inline config, else the definition, else 42704. (`evaluate`
    /// validates the count against it.)
    fn definition(&self) -> Result<Definition, CallError> {
        definitions::resolve(self.name, self.config)
    }

    /// On a distributed install, the number of shards of a global limit
    /// with several (whose shards spread over the nodes), else `None`.
    ///
    /// Errors: 42704 for an undefined limit.
    pub fn spread_shards(&self) -> Result<Option<i16>, CallError> {
        if self.key.is_some() {
            return Ok(None);
        }
        let shards = self.definition()?.config.shards;
        Ok((shards > 1).then_some(shards as i16))
    }
}

/// Which of a sharded limit's shards a consuming call may use.
#[derive(Clone)]
pub enum Shards {
    /// Every shard (on one server; a keyed limit on a distributed install).
    Every,
    /// On a distributed install, the shards of a global limit of `count`
    /// shards placed on this node, each with its route
    /// (`citus::spread`); `held` as `storage::consume_sharded` takes it.
    Placed {
        shards: Vec<(i16, citus::Route)>,
        count: i16,
        held: Option<i16>,
    },
}

/// The answer of a sharded limit, as the result row reports it.
fn answer(decision: ShardedDecision) -> Decision {
    Decision {
        ok: decision.ok,
        retry_after: decision.retry_after,
        remaining: decision.remaining,
        new_state: None,
    }
}

/// What a consuming call of `definition` answers for `decision` (shadow
/// mode answers a refusal as admitted), and how it is counted in
/// `rate_limiter.stats`. `count` is the tokens asked for; `contended`
/// whether a sharded call passed over or waited for a locked shard.
pub fn answered(
    definition: &Definition,
    count: f64,
    decision: Decision,
    contended: bool,
) -> (Decision, Counted) {
    let (decision, verdict) = verdict::answer(decision, definition.enforce);
    let admitted = verdict == Verdict::Admitted;
    let counted = Counted {
        verdict,
        count,
        reserved: admitted && decision.retry_after.is_some_and(|micros| micros > 0),
        near_limit: admitted && near_limit(&definition.config, decision.remaining),
        contended,
    };
    (decision, counted)
}

/// Locks the row, evaluates with the clock read after the lock, and records
/// the consumption (see `storage`). A sharded limit picks its shards as
/// `storage/shards.rs` describes. The decision as the call answers it,
/// and as it is counted (by the caller: `rate_wait` counts only its last
/// try).
pub fn consume(call: &Call<'_>) -> Result<(Decision, Counted), CallError> {
    if crate::catalog::objects().distributed {
        // Inside one of Citus's shard queries nothing else may run first
        // (reading the definitions there is itself a distributed query).
        citus::before_call("rate_limit()")?;
        // 25006 in a read-only transaction before the call goes anywhere
        // (another node's part of the transaction would not be read-only:
        // SPEC §8), after 42704 as on one server.
        call.definition()?;
        // SAFETY: reads the transaction state; raises an ERROR when read-only.
        unsafe { pg_sys::PreventCommandIfReadOnly(c"rate_limit()".as_ptr()) };
        if let Some(shards) = call.spread_shards()? {
            return citus::consume_spread(call, shards);
        }
        let dkey = citus::distribution_value(call.name, call.key, 0)?;
        return match citus::here(&dkey, true, || consume_here(call))? {
            Some(answer) => Ok(answer),
            None => citus::consume_elsewhere(call, &dkey, citus::alone(call)),
        };
    }
    consume_here(call)
}

/// [`consume`] on this node (on a distributed install: in the shard of
/// this node that holds the row).
pub fn consume_here(call: &Call<'_>) -> Result<(Decision, Counted), CallError> {
    consume_with(call, Shards::Every)
}

/// [`consume_here`] using the shards `shards` allows.
pub fn consume_with(call: &Call<'_>, shards: Shards) -> Result<(Decision, Counted), CallError> {
    let (decision, definition, contended) =
        definitions::restarting(|| consume_once(call, shards.clone()))?;
    Ok(answered(
        &definition,
        call.request.count,
        decision,
        contended,
    ))
}

/// One try of [`consume`]: fails with `DefinitionChanged` when the
/// definition changed while the call waited for its rows. The decision as
/// made, the definition it was made under, and whether a sharded call met
/// a locked shard.
fn consume_once(
    call: &Call<'_>,
    shards: Shards,
) -> Result<(Decision, Definition, bool), CallError> {
    let definition = call.definition()?;
    let config = definition.config;
    // Check the count against the config before touching the row.
    config.validate_count(call.request.count, call.request.reserve)?;
    let current = || definitions::recheck(call.name, call.config, &definition);
    let (places, held) = match shards {
        Shards::Every => {
            if config.shards > 1 && call.key.is_none() && citus::route().is_some() {
                // Its shards live on several nodes: citus::consume_spread.
                return Err(definition_changed());
            }
            (ShardPlaces::All, None)
        }
        Shards::Placed {
            shards,
            count,
            held,
        } => {
            if config.shards != i32::from(count) {
                return Err(definition_changed());
            }
            (ShardPlaces::Routed(shards), held)
        }
    };
    if config.shards > 1 {
        let (decision, contended) = storage::consume_sharded(
            call.shards(&config),
            places,
            held,
            shard_choice::draw,
            |candidates| {
                current()?;
                Ok(evaluate_looked_at(
                    &config,
                    call.id(),
                    candidates,
                    clock::now(),
                    call.request,
                )?)
            },
        )?;
        return Ok((answer(decision), definition, contended));
    }
    let decision = storage::consume(call.row(), |stored| {
        current()?;
        Ok(evaluate(
            &config,
            call.id(),
            stored,
            clock::now(),
            call.request,
        )?)
    })?;
    Ok((decision, definition, false))
}

/// Evaluates without locking or writing, and answers as `rate_limit` would
/// (shadow mode included). A sharded limit reads every shard and answers
/// for the two fullest (see `evaluate_all`).
pub fn check(call: &Call<'_>) -> Result<Decision, CallError> {
    if crate::catalog::objects().distributed {
        citus::usable()?;
        if let Some(shards) = call.spread_shards()? {
            // Its shards spread over the nodes: read them where they live.
            let definition = call.definition()?;
            let stored = citus::read_states(call.name, None, shards)?;
            return check_shards(call, &definition, &stored);
        }
        let dkey = citus::distribution_value(call.name, call.key, 0)?;
        return match citus::here(&dkey, false, || check_here(call))? {
            Some(answer) => Ok(answer),
            None => citus::elsewhere(call, &dkey, false, citus::alone(call))
                .map(|(decision, _)| decision),
        };
    }
    check_here(call)
}

/// [`check`] on this node (see [`consume_here`]).
pub fn check_here(call: &Call<'_>) -> Result<Decision, CallError> {
    let definition = call.definition()?;
    let config = definition.config;
    if config.shards > 1 && call.key.is_none() && citus::route().is_some() {
        // Its shards live on several nodes: check reads them there.
        return Err(definition_changed());
    }
    if config.shards > 1 {
        let limit = call.shards(&config);
        let stored = storage::read_shards(limit.name, limit.key, limit.shards);
        return check_shards(call, &definition, &stored);
    }
    let stored = storage::read(call.row());
    let decision = evaluate(&config, call.id(), stored, clock::now(), call.request)?;
    // Answer as rate_limit would: a state it could not store is an error.
    if let Some(state) = decision.new_state {
        storage::timestamp(state.ts)?;
    }
    Ok(verdict::answer(decision, definition.enforce).0)
}

/// The error of a call whose limit's definition changed between finding
/// where its shards live and deciding (55000).
pub fn definition_changed() -> CallError {
    CallError::Cluster(
        "the definition of this limit changed during the call".into(),
        "Retry the transaction.",
    )
}

/// [`check`] of a sharded limit, given the stored state of every shard
/// (`stored[i]` is shard `i`): the answer for the two fullest.
fn check_shards(
    call: &Call<'_>,
    definition: &Definition,
    stored: &[Option<rate_limiter_algorithm::State>],
) -> Result<Decision, CallError> {
    let config = definition.config;
    let decision = evaluate_all(&config, call.id(), stored, clock::now(), call.request)?;
    for state in decision.new_states.iter().flatten() {
        storage::timestamp(state.ts)?;
    }
    Ok(verdict::answer(answer(decision), definition.enforce).0)
}

/// `rate_limit`'s body: consume, and count the decision.
fn consume_counted(call: &Call<'_>) -> Result<Decision, CallError> {
    let (decision, counted) = consume(call)?;
    stats::count(call.name, counted);
    Ok(decision)
}

/// Turns a decision into the result row, or raises the refusal when the
/// call has `throws => true`. `name` and `key` borrow the arguments, so
/// nothing needs dropping when the refusal is raised.
fn finish(name: &[u8], key: Option<&[u8]>, throws: bool, decision: Decision) -> ResultRow {
    if !decision.ok && throws {
        raise_refused(
            name,
            key,
            decision.retry_after.unwrap_or(0),
            decision.remaining,
        );
    }
    ResultRow {
        ok: decision.ok,
        retry_after: decision.retry_after.map(Interval::from_micros),
        remaining: decision.remaining,
    }
}

/// Runs `body` for the arguments of the call `fcinfo` (`name, key, count,
/// reserve, throws, config`) and returns its result row.
///
/// # Safety
/// `fcinfo` must be a call of a function with those six arguments.
unsafe fn run(
    fcinfo: pg_sys::FunctionCallInfo,
    body: impl FnOnce(&Call<'_>) -> Result<Decision, CallError>,
) -> pg_sys::Datum {
    let call = match Call::new(
        pg_getarg::<&[u8]>(fcinfo, 0),
        pg_getarg::<&[u8]>(fcinfo, 1),
        pg_getarg::<f64>(fcinfo, 2),
        pg_getarg::<bool>(fcinfo, 3),
        pg_getarg::<bool>(fcinfo, 4),
        pg_getarg::<PgHeapTuple<'_, AllocatedByRust>>(fcinfo, 5),
    ) {
        Ok(call) => Call {
            config_argument: config_argument(fcinfo, 5),
            function: Some((*(*fcinfo).flinfo).fn_oid),
            ..call
        },
        Err(error) => report(CallError::Limit(error)),
    };
    let (name, key, throws) = (call.name, call.key, call.throws);
    let outcome = body(&call);
    match outcome {
        Ok(decision) => result_row::put(fcinfo, finish(name, key, throws, decision)),
        Err(error) => report(error),
    }
}

/// The inline config argument `number` of the call `fcinfo` as a datum and
/// its type, when the tables are distributed (Citus) and it is not NULL.
///
/// # Safety
/// `fcinfo` must be a call with a `rate_limiter.config` argument `number`.
pub unsafe fn config_argument(
    fcinfo: pg_sys::FunctionCallInfo,
    number: usize,
) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
    let argument = *(*fcinfo).args.as_slice(number + 1).get(number)?;
    if argument.isnull || !crate::catalog::objects().distributed {
        return None;
    }
    let type_id = pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, number as i32);
    Some((argument.value, type_id))
}

/// PostgreSQL's "version 1 calling convention" record for the two entry
/// points below (what `PG_FUNCTION_INFO_V1` declares in C).
const CALLING_CONVENTION: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// `rate_limiter.rate_limit(name, key, count, reserve, throws, config)`:
/// consumes `count` tokens if it can. See sql/functions.sql. A plain C
/// entry point rather than `#[pg_extern]`, to return its row in
/// materialize mode (see `result_row`).
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn rate_limit_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    run(fcinfo, consume_counted)
}

#[no_mangle]
pub extern "C" fn pg_finfo_rate_limit_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}

/// `rate_limiter.rate_check(...)`: the answer `rate_limit` would give, with
/// no lock and no write. See sql/functions.sql.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn rate_check_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    run(fcinfo, check)
}

#[no_mangle]
pub extern "C" fn pg_finfo_rate_check_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}

/// `rate_limiter.rate_reset(name, key)`: forgets the state of (name, key)
/// on every shard. See sql/functions.sql.
#[pg_extern(sql = false)]
fn rate_reset(name: Option<&[u8]>, key: Option<&[u8]>) {
    let name = match required(name, "name") {
        Ok(name) => name,
        Err(error) => report(CallError::Limit(error)),
    };
    if crate::catalog::objects().distributed {
        if let Err(error) = citus::before_call("rate_reset()") {
            report(error)
        }
    }
    if let Err(error) = write_as_owner(c"rate_reset()", |client| storage::delete(client, name, key))
    {
        report(CallError::Spi(error))
    }
}
