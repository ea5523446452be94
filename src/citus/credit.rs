//! `rate_credit` of rows on other nodes (`_rate_credit_at`), and of a
//! global limit whose shards spread over the nodes.
use super::delegation::{one_value_elsewhere, row_arguments};
use super::metadata::distribution_value;
use super::read::read_spread_states;
use super::site::{here, spread, Other, Spread};
use super::two_phase_commit::wrote;
use super::value::DistributionValue;
use crate::errors::CallError;
use crate::local;
use crate::storage::ShardPlaces;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use rate_limiter_algorithm::State;

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
        let shards = crate::definitions::resolve(name, None, inline)?
            .config
            .shards;
        if shards > 1 {
            return credit_spread(name, count, inline, config_argument, shards as i16);
        }
    }
    let dkey = distribution_value(name, key, 0)?;
    if let Some(value) = here(&dkey, true, |target| {
        local::credit::credit(name, key, count, inline, ShardPlaces::In(target))
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
    let shard = crate::definitions::resolve(name, None, inline)?
        .config
        .shard();
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
    let value = local::credit::credit(name, None, count, inline, spread.placed(shards, None))?;
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
