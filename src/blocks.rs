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
use rate_limiter_algorithm::Micros;
use std::cell::RefCell;

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
