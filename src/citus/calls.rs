//! Calls that reach rows on other nodes, inside the caller's distributed
//! transaction: consuming and checking (`_rate_limit_at`), reading
//! (`_rate_state_at`) and crediting (`_rate_credit_at`), for one row or
//! for a global limit's shards spread over the nodes.

use super::single_statement;
use super::{distribution_value, here, on_shard, spread, wrote, DistributionValue, Other, Spread};
use crate::errors::CallError;
use crate::limit::{self, Call};
use crate::stats::Counted;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::{Decision, State, Verdict};
use std::cell::RefCell;

/// The statement that runs a call on the node holding its row: Citus
/// delegates `_rate_limit_at` (a distributed function colocated with the
/// state table, `force_delegation`) by its first argument, which planning
/// turns into a constant (never NULL: a NULL crashes Citus 13.2.2).
const ELSEWHERE: &std::ffi::CStr =
    c"SELECT ok, retry_after, remaining, verdict, reserved, near_limit, contended \
     FROM rate_limiter._rate_limit_at($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// The columns of [`ELSEWHERE`]'s row: `ok`, `retry_after`,
/// `remaining`, `verdict`, `reserved`, `near_limit`, `contended`.
type ElsewhereRow = (
    Option<bool>,
    Option<i64>,
    Option<f64>,
    Option<i16>,
    Option<bool>,
    Option<bool>,
    Option<bool>,
);

/// [`ELSEWHERE`] parsed and analyzed once per backend (`SPI_keepplan`)
/// for one list of argument types, planned for each call with its
/// arguments as constants (`CURSOR_OPT_CUSTOM_PLAN`: Citus delegates a
/// call only when its distribution argument is a constant, which a
/// generic plan's parameter is not). PostgreSQL's plan cache analyzes it
/// again when an object it uses changes.
struct KeptPlan {
    types: Vec<pg_sys::Oid>,
    plan: pg_sys::SPIPlanPtr,
}

thread_local! {
    /// The kept plans of this backend, one per list of argument types
    /// (the type of `dkey`, and of the config once the extension was
    /// created again). Never freed: at most a few per backend.
    static KEPT_PLANS: RefCell<Vec<KeptPlan>> = const { RefCell::new(Vec::new()) };
}

/// The kept plan of [`ELSEWHERE`] for the argument types `types`, made on
/// first use; `None` when `plan_cache_mode` forces generic plans (which
/// the plan cache applies before the cursor option), or when it cannot be
/// made. Saves parsing and analyzing the statement on every call. Needs
/// an SPI connection.
fn kept_plan(types: &[pg_sys::Oid]) -> Option<pg_sys::SPIPlanPtr> {
    // SAFETY: reads a setting.
    if unsafe { pg_sys::plan_cache_mode }
        == pg_sys::PlanCacheMode::PLAN_CACHE_MODE_FORCE_GENERIC_PLAN as i32
    {
        return None;
    }
    let kept = KEPT_PLANS.with(|plans| {
        plans
            .borrow()
            .iter()
            .find(|kept| kept.types == types)
            .map(|kept| kept.plan)
    });
    if kept.is_some() {
        return kept;
    }
    let mut types = types.to_vec();
    // SAFETY: prepares in the current SPI connection and moves the plan
    // to a memory context of its own that lives as long as the backend.
    let plan = unsafe {
        let plan = pg_sys::SPI_prepare_cursor(
            ELSEWHERE.as_ptr(),
            types.len() as i32,
            types.as_mut_ptr(),
            pg_sys::CURSOR_OPT_CUSTOM_PLAN as i32,
        );
        if plan.is_null() || pg_sys::SPI_keepplan(plan) != 0 {
            return None;
        }
        plan
    };
    KEPT_PLANS.with(|plans| plans.borrow_mut().push(KeptPlan { types, plan }));
    Some(plan)
}

/// Runs [`ELSEWHERE`] with `arguments` in the current SPI connection, by
/// its kept plan (else as a one-shot plan, which is always custom),
/// read-only while this transaction has no transaction id (as pgrx's
/// `select`): its one row, all NULL if it returned none.
fn run_elsewhere(arguments: &[DatumWithOid<'_>]) -> Result<ElsewhereRow, pgrx::spi::SpiError> {
    let mut types = Vec::with_capacity(arguments.len());
    let mut values = Vec::with_capacity(arguments.len());
    let mut nulls: Vec<std::ffi::c_char> = Vec::with_capacity(arguments.len());
    for argument in arguments {
        types.push(argument.oid());
        let datum = argument.datum();
        nulls.push(if datum.is_some() { b' ' } else { b'n' } as std::ffi::c_char);
        values.push(datum.map_or(pg_sys::Datum::from(0), |datum| datum.sans_lifetime()));
    }
    // SAFETY: executes the statement with as many arguments as it has
    // parameters, of their types, and reads the row it returned while the
    // SPI connection is open (every column is passed by value).
    unsafe {
        let read_only = pg_sys::GetCurrentTransactionIdIfAny() == pg_sys::InvalidTransactionId;
        let status = match kept_plan(&types) {
            Some(plan) => {
                pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), nulls.as_ptr(), read_only, 1)
            }
            None => pg_sys::SPI_execute_with_args(
                ELSEWHERE.as_ptr(),
                types.len() as i32,
                types.as_mut_ptr(),
                values.as_mut_ptr(),
                nulls.as_ptr(),
                read_only,
                1,
            ),
        };
        Spi::check_status(status)?;
        let table = pg_sys::SPI_tuptable;
        if table.is_null() || pg_sys::SPI_processed != 1 {
            return Ok((None, None, None, None, None, None, None));
        }
        let tuple = *(*table).vals;
        let descriptor = (*table).tupdesc;
        let column = |number: i32| {
            let mut is_null = false;
            let datum = pg_sys::SPI_getbinval(tuple, descriptor, number, &mut is_null);
            (datum, is_null)
        };
        let boolean = |number| {
            let (datum, is_null) = column(number);
            bool::from_datum(datum, is_null)
        };
        let (retry_after, remaining, verdict) = (column(2), column(3), column(4));
        Ok((
            boolean(1),
            i64::from_datum(retry_after.0, retry_after.1),
            f64::from_datum(remaining.0, remaining.1),
            i16::from_datum(verdict.0, verdict.1),
            boolean(5),
            boolean(6),
            boolean(7),
        ))
    }
}

/// The SPI arguments of a delegated call: `dkey`, then `name` and `key`
/// as text (a NULL key for a global limit).
pub(super) fn row_arguments<'a>(
    dkey: &'a DistributionValue,
    name: &'a [u8],
    key: Option<&'a [u8]>,
) -> [DatumWithOid<'a>; 3] {
    // SAFETY: the bytes of text values become varlenas of type text.
    unsafe {
        [
            dkey.argument(),
            DatumWithOid::new(name, pg_sys::TEXTOID),
            match key {
                Some(key) => DatumWithOid::new(key, pg_sys::TEXTOID),
                None => DatumWithOid::null_oid(pg_sys::TEXTOID),
            },
        ]
    }
}

/// How a verdict travels between nodes (`_rate_limit_at`'s `verdict`).
pub(super) fn verdict_number(verdict: Verdict) -> i16 {
    match verdict {
        Verdict::Admitted => 0,
        Verdict::Refused => 1,
        Verdict::ShadowRefused => 2,
    }
}

pub(super) fn verdict_of(number: i16) -> Verdict {
    match number {
        0 => Verdict::Admitted,
        1 => Verdict::Refused,
        _ => Verdict::ShadowRefused,
    }
}

/// Runs `call` on the node holding the row of `dkey`: consumes
/// (`consume`) or checks there, inside this transaction (Citus's
/// distributed transaction: rollback undoes it; a transaction that wrote
/// on several nodes commits with two-phase commit). When `alone` (what
/// [`alone`] said of the call: it is its transaction's only work), as a
/// statement of its own there, in one round trip (see
/// `single_statement`). The decision as answered, and for a consuming
/// call how it is counted (here: statistics count on the node where the
/// function was called).
pub fn elsewhere(
    call: &Call<'_>,
    dkey: &DistributionValue,
    consume: bool,
    alone: bool,
) -> Result<(Decision, Option<Counted>), CallError> {
    let config = match call.config_argument {
        // SAFETY: the argument's datum, of its declared type.
        Some((datum, type_id)) => unsafe { DatumWithOid::new(datum, type_id) },
        None => DatumWithOid::null_oid(crate::catalog::objects().config_type),
    };
    let [dkey, name, key] = row_arguments(dkey, call.name, call.key);
    let arguments = [
        dkey,
        name,
        key,
        DatumWithOid::from(call.request.count),
        DatumWithOid::from(call.request.reserve),
        config,
        DatumWithOid::from(consume),
        crate::clock::override_to_send(),
        DatumWithOid::from(alone),
    ];
    // As the calling role: Citus keys its connections by role, so the
    // call reuses the connection this transaction's own statements on the
    // tenant's colocated rows use (one node, no 2PC), and the node holding
    // the row checks that role's privileges as this one would.
    // Read-only SPI (no transaction id here): the write is the other
    // node's, and a transaction id here would only add a commit record to
    // this node's WAL.
    let run = || Spi::connect(|_| run_elsewhere(&arguments));
    let row = if alone {
        single_statement::without_transaction_block(run)
    } else {
        run()
    }?;
    let (Some(ok), retry_after, Some(remaining), verdict, reserved, near_limit, contended) = row
    else {
        return Err(CallError::Cluster(
            "rate_limiter._rate_limit_at() on another node returned no answer".into(),
            "Check that every node runs the same version of rate_limiter.",
        ));
    };
    let decision = Decision {
        ok,
        retry_after,
        remaining,
        new_state: None,
    };
    let counted = verdict.map(|verdict| Counted {
        verdict: verdict_of(verdict),
        count: call.request.count,
        reserved: reserved.unwrap_or(false),
        near_limit: near_limit.unwrap_or(false),
        contended: contended.unwrap_or(false),
    });
    Ok((decision, counted))
}

/// Whether `call` (of `rate_limit` or `rate_check` called by SQL) is its
/// transaction's only work, so that it may reach another node as a
/// statement of its own (see `single_statement::alone`).
pub fn alone(call: &Call<'_>) -> bool {
    call.function.is_some_and(single_statement::alone)
}

/// [`elsewhere`] for a consuming call: the decision and how it counts.
pub fn consume_elsewhere(
    call: &Call<'_>,
    dkey: &DistributionValue,
    alone: bool,
) -> Result<(Decision, Counted), CallError> {
    let (decision, counted) = elsewhere(call, dkey, true, alone)?;
    wrote(None)?;
    counted.map(|counted| (decision, counted)).ok_or_else(|| {
        CallError::Cluster(
            "rate_limiter._rate_limit_at() on another node did not say how its decision counts"
                .into(),
            "Check that every node runs the same version of rate_limiter.",
        )
    })
}

/// `rate_limit` of a global limit with `shards` (>= 2) shards on a
/// distributed install (SPEC §10): the shards on this node first (as on
/// one server, over those shards only); only when they cannot serve the
/// call, the other nodes', one node after the other in random order,
/// through `_rate_limit_at` with the distribution value of one of its
/// shards, until one admits. There the call uses only that node's shards
/// and never waits for one another transaction holds (it passes over it,
/// or answers as refused), so no two calls wait for each other across
/// nodes. Every node consumes within its own shards' bounds, so the limit
/// never admits more than the unsharded bound. A refusal answers with the
/// soonest `retry_after` of the nodes asked.
///
/// Errors: 55000 as [`super::site`]; those of `rate_limit`.
pub fn consume_spread(call: &Call<'_>, shards: i16) -> Result<(Decision, Counted), CallError> {
    let spread = spread(call.name, shards, true)?;
    let mut best: Option<(Decision, Counted)> = None;
    if let Some((_, _, dkey)) = spread.local.first() {
        let answer = limit::consume_with(call, spread.placed(shards, None))?;
        wrote(Some(dkey))?;
        if answer.1.verdict == Verdict::Admitted {
            return Ok(answer);
        }
        best = Some(answer);
    }
    for other in &spread.others {
        let answer = consume_elsewhere(call, &other.dkey, false)?;
        if answer.1.verdict == Verdict::Admitted {
            return Ok(answer);
        }
        best = Some(match best {
            Some(earlier) if sooner(&earlier.0, &answer.0) => earlier,
            _ => answer,
        });
    }
    best.ok_or_else(|| {
        CallError::Cluster(
            "no shard of this limit is placed on any node".into(),
            "Check pg_dist_shard and pg_dist_placement for rate_limiter.rate_limits.",
        )
    })
}

/// Whether refusal `a` says to retry no later than `b` (no `retry_after`:
/// never).
pub(super) fn sooner(a: &Decision, b: &Decision) -> bool {
    match (a.retry_after, b.retry_after) {
        (Some(a), Some(b)) => a <= b,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) => true,
    }
}

/// The stored state of the shards of the global limit `name` placed on
/// this node (`spread.local`), without locking: `states[i]` is shard `i`
/// of `shards`, `None` for a shard elsewhere or without a row.
pub(super) fn read_local_shards(name: &[u8], spread: &Spread, shards: i16) -> Vec<Option<State>> {
    let mut states = vec![None; shards.max(0) as usize];
    for (number, route, _) in &spread.local {
        if let Some(slot) = states.get_mut(*number as usize) {
            *slot = on_shard(*route, || {
                crate::storage::read(crate::storage::RowId {
                    name,
                    key: None,
                    shard: *number,
                })
            });
        }
    }
    states
}

/// The statement that reads the stored rows of (name, key) on the node
/// holding them: Citus delegates `_rate_state_at` (distributed like
/// `_rate_limit_at`) by its first argument.
pub(super) const STATE_ELSEWHERE: &str =
    "SELECT shard, value, ts FROM rate_limiter._rate_state_at($1, $2, $3, $4)";

/// The stored state of shards `0..shards` of (name, key) on a distributed
/// install, read without locking where the rows live, as
/// `storage::read_shards` reads them on one server: `states[i]` is shard
/// `i`. A row on another node is read there through `_rate_state_at`, as
/// the calling role and inside its transaction (read-only ones too).
///
/// A global limit with several shards: its shards on this node read here,
/// the others on each node that holds some, through `_rate_state_at` with
/// the distribution value of one of them.
///
/// Errors: 55000 as [`super::site`]; 22P02 as [`distribution_value`].
pub fn read_states(
    name: &[u8],
    key: Option<&[u8]>,
    shards: i16,
) -> Result<Vec<Option<State>>, CallError> {
    if shards > 1 && key.is_none() {
        return read_spread_states(name, &spread(name, shards, false)?, shards);
    }
    let dkey = distribution_value(name, key, 0)?;
    if let Some(states) = here(&dkey, false, || {
        Ok(crate::storage::read_shards(name, key, shards))
    })? {
        return Ok(states);
    }
    let mut states = vec![None; shards.max(0) as usize];
    read_elsewhere(&dkey, name, key, shards, &mut states)?;
    Ok(states)
}

/// Fills `states` with the stored rows of (name, key) that
/// `_rate_state_at` returns from the node holding the row of `dkey`
/// (`states[i]` is shard `i`; rows beyond it are ignored).
pub(super) fn read_elsewhere(
    dkey: &DistributionValue,
    name: &[u8],
    key: Option<&[u8]>,
    shards: i16,
    states: &mut [Option<State>],
) -> Result<(), CallError> {
    let [dkey, name, key] = row_arguments(dkey, name, key);
    let arguments = [dkey, name, key, DatumWithOid::from(shards)];
    Spi::connect_mut(|client| {
        for row in client.update(STATE_ELSEWHERE, None, &arguments)? {
            if let (Some(shard), Some(value), Some(ts)) = (
                row.get::<i16>(1)?,
                row.get::<f64>(2)?,
                row.get::<TimestampWithTimeZone>(3)?,
            ) {
                if let Some(slot) = states.get_mut(shard.max(0) as usize) {
                    *slot = Some(State {
                        value,
                        ts: ts.into_inner(),
                    });
                }
            }
        }
        Ok::<_, pgrx::spi::SpiError>(())
    })?;
    Ok(())
}

/// The stored state of every shard of the global limit `name` (`shards`
/// shards, placed as `spread` says): this node's read here, the others
/// through `_rate_state_at` on each node that holds some.
pub(super) fn read_spread_states(
    name: &[u8],
    spread: &Spread,
    shards: i16,
) -> Result<Vec<Option<State>>, CallError> {
    let mut states = read_local_shards(name, spread, shards);
    for other in &spread.others {
        read_elsewhere(&other.dkey, name, None, shards, &mut states)?;
    }
    Ok(states)
}

/// The statement that credits (name, key) on the node holding its rows:
/// Citus delegates `_rate_credit_at` by its first argument (called in
/// `FROM`: Citus takes `SELECT f(...)` run through SPI for a PL/pgSQL
/// simple expression and does not delegate it).
pub(super) const CREDIT_ELSEWHERE: &str =
    "SELECT value FROM rate_limiter._rate_credit_at($1, $2, $3, $4, $5, $6) AS value";

/// `rate_credit` on a distributed install: on this node's shard when it
/// holds the rows (Citus's metadata lock taken as for a consuming call),
/// else through `_rate_credit_at` on the node that does, as the calling
/// role and inside this transaction (2PC as for a consuming call).
/// `config_argument` is the inline config as its SQL value (a composite
/// datum of `rate_limiter.config`). A global limit with several shards:
/// `credit_spread`. The limit's value afterwards.
///
/// Errors: 55000 as [`super::site`]; 22P02 as [`distribution_value`]; the errors
/// of `rate_credit`.
pub fn credit(
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    inline: Option<rate_limiter_algorithm::Config>,
    config_argument: Option<pg_sys::Datum>,
) -> Result<f64, CallError> {
    if key.is_none() {
        let shards = crate::definitions::resolve(name, inline)?.config.shards;
        if shards > 1 {
            return credit_spread(name, count, inline, config_argument, shards as i16);
        }
    }
    let dkey = distribution_value(name, key, 0)?;
    if let Some(value) = here(&dkey, true, || {
        crate::credit::credit_here(name, key, count, inline)
    })? {
        return Ok(value);
    }
    credit_elsewhere(&dkey, name, key, count, config_argument)
}

/// `rate_credit` of a global limit with `shards` (>= 2) shards on a
/// distributed install. The count is shared out as on one server (the
/// emptiest shards first, none above its capacity; a shard without a row
/// is full), planned on the shards' stored states read where they live,
/// then each node's share is credited there, the nodes in ascending group
/// order (so two credits never wait for each other in a cycle; a
/// consuming call waits only on its own node). Each node caps its shards
/// at capacity again under its locks, so a share meanwhile consumed
/// elsewhere never overfills a shard. The value afterwards, summed over
/// every shard.
///
/// Errors: as [`credit`].
pub(super) fn credit_spread(
    name: &[u8],
    count: f64,
    inline: Option<rate_limiter_algorithm::Config>,
    config_argument: Option<pg_sys::Datum>,
    shards: i16,
) -> Result<f64, CallError> {
    let shard = crate::definitions::resolve(name, inline)?.config.shard();
    let spread = spread(name, shards, true)?;
    let stored = read_spread_states(name, &spread, shards)?;
    let existing: Vec<(usize, State)> = stored
        .iter()
        .enumerate()
        .filter_map(|(number, state)| state.map(|state| (number, state)))
        .collect();
    let states: Vec<State> = existing.iter().map(|(_, state)| *state).collect();
    let now = crate::clock::now();
    let before = rate_limiter_algorithm::credit(&shard, &states, 0.0, now);
    let after = rate_limiter_algorithm::credit(&shard, &states, count, now);
    // Each shard's share, and its value as things stand.
    let mut share = vec![0.0; shards as usize];
    let mut value = vec![shard.capacity(); shards as usize];
    for (((number, _), before), after) in existing.iter().zip(&before).zip(&after) {
        share[*number] = after.value - before.value;
        value[*number] = before.value;
    }
    let local: Vec<i16> = spread.local.iter().map(|(number, ..)| *number).collect();
    let mut nodes: Vec<(i32, Option<&Other>, &[i16])> = vec![(spread.local_group, None, &local)];
    nodes.extend(
        spread
            .others
            .iter()
            .map(|other| (other.group, Some(other), other.shards.as_slice())),
    );
    nodes.sort_by_key(|(group, ..)| *group);
    let mut total = 0.0;
    for (_, other, numbers) in nodes {
        let amount: f64 = numbers.iter().map(|number| share[*number as usize]).sum();
        if amount <= 0.0 {
            total += numbers
                .iter()
                .map(|number| value[*number as usize])
                .sum::<f64>();
            continue;
        }
        total += match other {
            Some(other) => credit_elsewhere(&other.dkey, name, None, amount, config_argument)?,
            None => credit_local_shards(name, amount, inline, &spread, shards)?,
        };
    }
    Ok(total)
}

/// Credits `count` to the shards of the global limit `name` (of `shards`
/// shards) on this node (`spread.local`, at least one): the value of
/// those shards afterwards.
pub(super) fn credit_local_shards(
    name: &[u8],
    count: f64,
    inline: Option<rate_limiter_algorithm::Config>,
    spread: &Spread,
    shards: i16,
) -> Result<f64, CallError> {
    let value = crate::credit::credit_on(
        name,
        None,
        count,
        inline,
        Some(spread.placed_shards(shards)),
    )?;
    if let Some((_, _, dkey)) = spread.local.first() {
        wrote(Some(dkey))?;
    }
    Ok(value)
}

/// Credits (name, key) through `_rate_credit_at` on the node holding the
/// row of `dkey`, inside this transaction: the value it answers.
pub(super) fn credit_elsewhere(
    dkey: &DistributionValue,
    name: &[u8],
    key: Option<&[u8]>,
    count: f64,
    config_argument: Option<pg_sys::Datum>,
) -> Result<f64, CallError> {
    let config_type = crate::catalog::objects().config_type;
    let [dkey_argument, name, key] = row_arguments(dkey, name, key);
    let arguments = [
        dkey_argument,
        name,
        key,
        DatumWithOid::from(count),
        match config_argument {
            // SAFETY: the config datum is of its type.
            Some(datum) => unsafe { DatumWithOid::new(datum, config_type) },
            None => DatumWithOid::null_oid(config_type),
        },
        crate::clock::override_to_send(),
    ];
    let value = one_value_elsewhere(CREDIT_ELSEWHERE, &arguments, "_rate_credit_at")?;
    wrote(None)?;
    Ok(value)
}

/// Runs `statement`, the call of the delegated internal function
/// `function` with `arguments`, through a writing SPI connection, inside
/// this transaction: the first column of its one row.
///
/// Errors: 55000 when it returned no row or NULL; those of the call.
pub(super) fn one_value_elsewhere<T: FromDatum + IntoDatum>(
    statement: &str,
    arguments: &[DatumWithOid<'_>],
    function: &str,
) -> Result<T, CallError> {
    Spi::connect_mut(|client| {
        client
            .update(statement, Some(1), arguments)?
            .first()
            .get::<T>(1)
    })?
    .ok_or_else(|| {
        CallError::Cluster(
            format!("rate_limiter.{function}() on another node returned no answer"),
            "Check that every node runs the same version of rate_limiter.",
        )
    })
}
