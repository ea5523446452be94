//! `rate_limiter.status()`: where a limit stands now, without consuming
//! (what a UI shows), and the reading of a limit's state that
//! `rate_limiter.http_headers()` shares. Read-only: works in `BEGIN READ
//! ONLY` and on a hot standby.

use crate::clock;
use crate::config::{inline_config_of, required};
use crate::definitions::{self, Definition};
use crate::errors::{report, CallError};
use crate::placement;
use crate::storage;
use pgrx::prelude::*;
use rate_limiter_algorithm::{LimitId, Micros, Status};

/// The status of (name, key) under `definition` at the current time,
/// read with the active snapshot, taking no lock (a blocked key: value 0,
/// full no earlier than the block's end). Returns it with that
/// time.
pub fn current(
    name: &[u8],
    key: Option<&[u8]>,
    definition: &Definition,
) -> Result<(Status, Micros), CallError> {
    let config = &definition.config;
    let stored = placement::read_states(name, key, definition)?;
    let now = clock::now();
    let status = rate_limiter_algorithm::status(config, LimitId { name, key }, &stored, now)?;
    // A blocked key shows no tokens, and is full no earlier than its block
    // ends (docs/blocks.md).
    let status = match definition.blocked_until {
        Some(until) if definition.blocked_at(now).is_some() => Status {
            value: 0.0,
            full_at: status.full_at.max(until),
            ..status
        },
        _ => status,
    };
    Ok((status, now))
}

/// The checked arguments `name` and `config` of a read-only function, and
/// what applies to `key` (inline, else the key's override, else the
/// definition, else 42704).
pub fn arguments<'a>(
    name: Option<&'a [u8]>,
    key: Option<&[u8]>,
    config: Option<pg_sys::HeapTupleHeader>,
) -> Result<(&'a [u8], Definition), CallError> {
    let name = required(name, "name")?;
    let inline = inline_config_of(config)?;
    placement::before_read()?;
    Ok((name, definitions::resolve_shown(name, key, inline)?))
}

/// `rate_limiter.status(name, key, config)`. See sql/functions.sql.
/// What `status` and `http_headers` show: a limit (its name and
/// definition), or a composite's members with theirs.
pub enum Shown<'a> {
    Limit(&'a [u8], Definition),
    Composite(Vec<(Vec<u8>, Definition)>),
}

/// [`arguments`], or for a composite's name (docs/composites.md) its
/// members.
pub fn shown<'a>(
    name: Option<&'a [u8]>,
    key: Option<&[u8]>,
    config: Option<pg_sys::HeapTupleHeader>,
) -> Result<Shown<'a>, CallError> {
    let inline = config.is_some();
    match arguments(name, key, config) {
        Ok((name, definition)) => Ok(Shown::Limit(name, definition)),
        Err(error) if !inline => {
            let found =
                name.map_or(Ok(None), |name| crate::composites::instead_of(&error, name))?;
            match found {
                Some(found) => Ok(Shown::Composite(super::composite::members_shown(
                    &found, key,
                )?)),
                None => Err(error),
            }
        }
        Err(error) => Err(error),
    }
}

/// A composite's status: its tightest member's (the fewest tokens now;
/// of two alike, the one full later), and that member's config.
fn tightest(
    key: Option<&[u8]>,
    members: &[(Vec<u8>, Definition)],
) -> Result<(Status, rate_limiter_algorithm::Config), CallError> {
    let mut tightest: Option<(Status, rate_limiter_algorithm::Config)> = None;
    for (member, definition) in members {
        let (status, _) = current(member, key, definition)?;
        let tighter = tightest.as_ref().is_none_or(|(least, _)| {
            status.value < least.value
                || (status.value == least.value && status.full_at > least.full_at)
        });
        if tighter {
            tightest = Some((status, definition.config));
        }
    }
    tightest.ok_or_else(|| CallError::Undefined(Vec::new()))
}

#[pg_extern(sql = false)]
fn status(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    config: Option<pgrx::composite_type!("rate_limiter.config")>,
) -> TableIterator<
    'static,
    (
        name!(value, f64),
        name!(capacity, f64),
        name!(full_at, Option<TimestampWithTimeZone>),
        name!(shards, i32),
    ),
> {
    let config = config.map(crate::config::header_of);
    let result = shown(name, key, config).and_then(|shown| {
        let (status, config) = match shown {
            Shown::Limit(name, definition) => {
                (current(name, key, &definition)?.0, definition.config)
            }
            Shown::Composite(members) => tightest(key, &members)?,
        };
        let full_at = storage::timestamp(status.full_at)?;
        Ok((
            rate_limiter_algorithm::shown(status.value),
            status.capacity,
            Some(full_at),
            config.shards,
        ))
    });
    match result {
        Ok(row) => TableIterator::once(row),
        Err(CallError::Limit(error)) if crate::config::is_concurrency_kind(&error) => {
            match concurrency_status(name, key, config) {
                Ok(row) => TableIterator::once(row),
                Err(error) => report(error),
            }
        }
        Err(error) => report(error),
    }
}

/// `status` of a concurrency limit (docs/concurrency.md): the PL/pgSQL
/// both editions share (sql/concurrency.sql), as the extension's owner.
/// (It counts the slots held without a lock; full_at NULL when a
/// transaction lease holds one.)
fn concurrency_status(
    name: Option<&[u8]>,
    key: Option<&[u8]>,
    config: Option<pg_sys::HeapTupleHeader>,
) -> Result<(f64, f64, Option<TimestampWithTimeZone>, i32), CallError> {
    let arguments = [
        name.map_or_else(
            pgrx::datum::DatumWithOid::null::<&str>,
            storage::text_argument,
        ),
        key.map_or_else(
            pgrx::datum::DatumWithOid::null::<&str>,
            storage::text_argument,
        ),
        crate::config::argument(config),
    ];
    crate::security::as_owner(|| {
        // (connect_mut and update: the function is VOLATILE, and an error
        // it raises then reaches the caller as it was raised.)
        pgrx::spi::Spi::connect_mut(|client| {
            let table = client.update(CONCURRENCY_STATUS, Some(1), &arguments)?;
            let row = table.first();
            Ok((
                required(row.get::<f64>(1)?, "value")?,
                required(row.get::<f64>(2)?, "capacity")?,
                row.get::<TimestampWithTimeZone>(3)?,
                required(row.get::<i32>(4)?, "shards")?,
            ))
        })
    })
}

/// [`concurrency_status`]'s statement.
const CONCURRENCY_STATUS: &str =
    "SELECT value, capacity, full_at, shards FROM rate_limiter._concurrency_status($1, $2, $3)";
