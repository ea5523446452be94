//! Blocks (table `rate_limiter.blocks`, docs/blocks.md): reading the block
//! of one (name, key). `block()`, `unblock()` and `blocked()` are
//! `crate::api::blocks`; the refusal of a blocked key is decided in
//! `crate::definitions::resolve`, which every call runs.
//!
//! A call reads the table only for names that have blocks (the cached
//! definition says so; any write to the table fires the definitions'
//! statement trigger, whose invalidation refreshes that in every backend).
//! The read is not cached: it is one index probe of the unique (name, key)
//! index through a kept plan, as the extension's owner, with the latest
//! snapshot (as definitions and overrides are read), so a block committed
//! by another session is seen by the next call whatever its isolation
//! level.

use crate::errors::CallError;
use crate::storage::text_argument;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::{BlockPolicy, Micros, Strikes};
use std::cell::{Cell, RefCell};

/// One row of `rate_limiter.blocks`.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The key is refused until this instant (microseconds since
    /// 2000-01-01 UTC; `infinity` is `i64::MAX`).
    pub until: Micros,
    /// How many blocks the key has had (`blocked()` shows it).
    pub strikes: i32,
    /// What `block()` was told, for the refusal's DETAIL.
    pub reason: Option<String>,
}

/// (name, key, reason) of the last blocked key a call of this backend was
/// refused for: the RL429 DETAIL of a call with `throws => true` says
/// `"blocked": true` and the reason ([`refusal_reason`]).
type Refused = (Vec<u8>, Option<Vec<u8>>, Option<String>);

thread_local! {
    static REFUSED: RefCell<Option<Refused>> = const { RefCell::new(None) };
    /// Set while [`strike`] writes a block that no cached definition needs
    /// to know of.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

const BY_KEY: &str =
    "SELECT until, strikes, reason FROM rate_limiter.blocks WHERE name = $1 AND key = $2";
const GLOBAL: &str =
    "SELECT until, strikes, reason FROM rate_limiter.blocks WHERE name = $1 AND key IS NULL";

/// The block of (`name`, `key`) (`key` `None`: the global limit), over or
/// not, or `None`. No table (a version before 0.6.0): `None`.
///
/// Errors: SPI's (the table altered by hand).
pub fn find(name: &[u8], key: Option<&[u8]>) -> Result<Option<Block>, CallError> {
    if crate::catalog::objects().blocks == pg_sys::InvalidOid {
        return Ok(None);
    }
    let text = pgrx::PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);
    crate::security::as_owner(|| {
        // SAFETY: pushed and popped around the read; an error pops it in
        // the abort.
        unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
        let found = Spi::connect(|client| {
            let table = match key {
                Some(key) => {
                    let plan = crate::plans::kept_plan(client, BY_KEY, &[text, text], false)?;
                    client.select(plan, Some(1), &[text_argument(name), text_argument(key)])?
                }
                None => {
                    let plan = crate::plans::kept_plan(client, GLOBAL, &[text], false)?;
                    client.select(plan, Some(1), &[text_argument(name)])?
                }
            };
            if table.is_empty() {
                return Ok::<_, CallError>(None);
            }
            let row = table.first();
            Ok(Some(Block {
                until: row
                    .get::<TimestampWithTimeZone>(1)?
                    .map_or(i64::MIN, TimestampWithTimeZone::into_inner),
                strikes: row.get::<i32>(2)?.unwrap_or(0),
                reason: row.get::<String>(3)?,
            }))
        });
        unsafe { pg_sys::PopActiveSnapshot() };
        found
    })
}

/// Notes that a call of (`name`, `key`) is refused by a block given for
/// `reason` ([`refusal_reason`]).
pub fn note_refusal(name: &[u8], key: Option<&[u8]>, reason: Option<String>) {
    REFUSED.with(|refused| {
        if let Ok(mut refused) = refused.try_borrow_mut() {
            *refused = Some((name.to_vec(), key.map(<[u8]>::to_vec), reason));
        }
    });
}

/// When the last call of (`name`, `key`) that a block refused was this
/// backend's last blocked call: the block's reason (`Some(None)`: none
/// given). Taken: asked again, `None`.
pub fn refusal_reason(name: &[u8], key: Option<&[u8]>) -> Option<Option<String>> {
    REFUSED.with(|refused| {
        let mut refused = refused.try_borrow_mut().ok()?;
        match refused.take() {
            Some((blocked_name, blocked_key, reason))
                if blocked_name == name && blocked_key.as_deref() == key =>
            {
                Some(reason)
            }
            _ => None,
        }
    })
}

/// Forgets the noted refusal ([`note_refusal`]): a call that raises a
/// refusal runs it first, so that a block noted for an earlier call that
/// did not raise is never reported for it.
pub fn forget_refusal() {
    REFUSED.with(|refused| {
        if let Ok(mut refused) = refused.try_borrow_mut() {
            *refused = None;
        }
    });
}

/// Whether the blocks' statement trigger should invalidate nothing (an
/// automatic block of a name whose cached definitions already say it has
/// blocks, or of an undefined name: see [`strike`]).
pub fn quiet() -> bool {
    QUIET.with(Cell::get)
}

/// Unsets [`QUIET`] when dropped (also when an error unwinds).
struct Quiet;

impl Drop for Quiet {
    fn drop(&mut self) {
        QUIET.with(|quiet| quiet.set(false));
    }
}

/// The first timestamp PostgreSQL cannot store (`END_TIMESTAMP`,
/// 294277-01-01 UTC): an end at or past it is stored as `infinity`.
const END_TIMESTAMP: Micros = 9_223_371_331_200_000_000;

/// `micros` as a timestamptz to store: `infinity` at or past
/// [`END_TIMESTAMP`].
fn stored(micros: Micros) -> TimestampWithTimeZone {
    let micros = if micros >= END_TIMESTAMP {
        i64::MAX
    } else {
        micros
    };
    // SAFETY: a timestamptz datum is its microseconds; `i64::MAX` is
    // PostgreSQL's `infinity` (DT_NOEND).
    unsafe { TimestampWithTimeZone::from_datum(pg_sys::Datum::from(micros), false) }
        .unwrap_or_else(TimestampWithTimeZone::positive_infinity)
}

const STRIKE_BY_KEY: &str = "SELECT until, strikes, forget_at FROM rate_limiter.blocks \
                             WHERE name = $1 AND key = $2 FOR UPDATE";
const STRIKE_GLOBAL: &str = "SELECT until, strikes, forget_at FROM rate_limiter.blocks \
                             WHERE name = $1 AND key IS NULL FOR UPDATE";
/// Writes a strike over the row read (locked) before, or over a row that
/// another call of a sharded limit inserted meanwhile, keeping the later
/// end.
const WRITE_STRIKE: &str = "
    INSERT INTO rate_limiter.blocks AS b (name, key, until, strikes, reason, forget_at)
    VALUES ($1, $2, $3, $4, NULL, $5)
    ON CONFLICT (name, key) DO UPDATE SET
        until = greatest(b.until, excluded.until),
        strikes = excluded.strikes,
        reason = CASE WHEN b.until > excluded.until THEN b.reason END,
        forget_at = greatest(excluded.forget_at, b.until)";

/// Starts the automatic block of (`name`, `key`) under `policy` at `now`
/// (docs/blocks.md, "Automatic blocks"): the admitted call that used the
/// limit up writes it, in the caller's transaction (it commits with the
/// call's work, and a rollback undoes both), as the extension's owner.
/// The key's stored block, if any, is locked and read first
/// (`BlockPolicy::strike`).
///
/// The table's statement trigger invalidates every backend's cached
/// definitions unless `known` (the caller's cached definitions already say
/// that the name has blocks, or the name has no definition to cache:
/// `crate::definitions::blocks_known`).
///
/// Errors: SPI's.
pub fn strike(
    name: &[u8],
    key: Option<&[u8]>,
    policy: &BlockPolicy,
    now: Micros,
    known: bool,
) -> Result<(), CallError> {
    let quiet = known;
    let _reset = Quiet;
    QUIET.with(|cell| cell.set(quiet));
    crate::security::write_as_owner(c"rate_limit()", |client| {
        let found = match key {
            Some(key) => client.update(
                STRIKE_BY_KEY,
                Some(1),
                &[text_argument(name), text_argument(key)],
            )?,
            None => client.update(STRIKE_GLOBAL, Some(1), &[text_argument(name)])?,
        };
        let previous = if found.is_empty() {
            None
        } else {
            let row = found.first();
            Some(Strikes {
                until: row
                    .get::<TimestampWithTimeZone>(1)?
                    .map_or(i64::MIN, TimestampWithTimeZone::into_inner),
                strikes: row.get::<i32>(2)?.unwrap_or(0),
                forget_at: row
                    .get::<TimestampWithTimeZone>(3)?
                    .map(TimestampWithTimeZone::into_inner),
            })
        };
        let next = policy.strike(previous, now);
        client.update(
            WRITE_STRIKE,
            None,
            &[
                text_argument(name),
                key.map_or_else(|| Option::<&str>::None.into(), text_argument),
                stored(next.until).into(),
                next.strikes.into(),
                next.forget_at.map(stored).into(),
            ],
        )?;
        Ok::<_, CallError>(())
    })
}
