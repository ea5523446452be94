//! Named limits: the lookup of a definition by name (table
//! `rate_limiter.definitions`); `define()` and `undefine()` write it
//! (`crate::api::define`).
//!
//! Lookups are cached per backend (also "no such definition"), so a call
//! by name runs no statement for its definition. Any write to the table
//! fires a statement trigger that sends a relcache invalidation for it;
//! every backend drops its cache when it processes an invalidation, which
//! each lookup checks for first. A miss reads the table with the latest
//! snapshot, as PostgreSQL reads its catalogs. So a committed `define` is
//! seen by the next call in every session, whatever its isolation level.

use crate::bounded_cache::BoundedCache;
use crate::config::{required, ConfigValues};
use crate::errors::CallError;
use crate::plans::kept_plan;
use crate::storage::text_argument;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgOid;
use rate_limiter_algorithm::{Config, Decision, Kind, Micros};
use std::cell::RefCell;

const TEXT: PgOid = PgOid::BuiltIn(pg_sys::PgBuiltInOids::TEXTOID);

/// A definition by name, and whether any key of the name has an override.
///
/// Whether the name has overrides is the first entry of the overrides'
/// primary key for the name, if any: an `ORDER BY` of the index's columns
/// with `LIMIT 1`, so the planner probes the index. (A bare `EXISTS` was
/// planned as a sequential scan, which is cheap when the statistics say
/// every row has one name and ruinous for any other name: a definition
/// lookup of a plan read all of 1,000,000 overrides.)
macro_rules! lookup {
    ($blocks:literal) => {
        concat!(
            "SELECT kind::text, rate, period, capacity, max_reserved, shards, start, enforce, \
                    EXISTS (SELECT FROM (SELECT FROM rate_limiter.overrides AS o \
                                         WHERE o.name = d.name COLLATE \"C\" \
                                         ORDER BY o.name, o.key LIMIT 1) AS first), ",
            $blocks,
            ", block_for, max_block, forget_after, time_zone \
             FROM rate_limiter.definitions AS d WHERE name = $1"
        )
    };
}
const LOOKUP: &str = lookup!(
    "EXISTS (SELECT FROM (SELECT FROM rate_limiter.blocks AS b \
                          WHERE b.name = d.name COLLATE \"C\" \
                          ORDER BY b.name, b.key LIMIT 1) AS first)"
);

/// [`LOOKUP`] where a cluster holds the blocks (`blocks::held_by_cluster`,
/// docs/blocks.md, "Citus"): no node can count a name's blocks cheaply,
/// so every name may have some, and every call looks for its key's block
/// where its rows are (one index probe there).
const LOOKUP_BLOCKS_SPREAD: &str = lookup!("true");

/// [`LOOKUP`] on the tables of a version before 0.6.0 (no overrides, no
/// blocks).
const LOOKUP_BEFORE_0_6: &str =
    "SELECT kind::text, rate, period, capacity, max_reserved, shards, start, enforce, false, false, \
            NULL::interval, NULL::interval, NULL::interval, NULL::text \
     FROM rate_limiter.definitions WHERE name = $1";

/// [`LOOKUP`] on the tables of a version before 0.4.0 (no column
/// `enforce`: every limit enforces), until `ALTER EXTENSION ... UPDATE`.
const LOOKUP_BEFORE_0_4: &str =
    "SELECT kind::text, rate, period, capacity, max_reserved, shards, start, true, false, false, \
            NULL::interval, NULL::interval, NULL::interval, NULL::text \
     FROM rate_limiter.definitions WHERE name = $1";

/// What a call of a limit uses: its config, whether it enforces
/// (`false`: shadow mode, see `rate_limiter_algorithm::verdict`), and the
/// regime its state rows are written under (`None`: the definition's;
/// `crate::overrides::regime`). An inline config always enforces. And,
/// when the key is blocked, the end of its block (docs/blocks.md): until
/// then every consuming and checking call is refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Definition {
    pub config: Config,
    pub enforce: bool,
    pub regime: Option<i64>,
    /// Microseconds since 2000-01-01 UTC; `None`: not blocked at the
    /// instant the call resolved.
    pub blocked_until: Option<Micros>,
}

impl Definition {
    /// The refusal of a call of a blocked key at `now`
    /// (`rate_limiter_algorithm::blocked`), or `None`.
    pub fn blocked_at(&self, now: Micros) -> Option<Decision> {
        self.blocked_until
            .and_then(|until| rate_limiter_algorithm::blocked(until, now))
    }
}

/// A definition as stored and cached: the definition, and whether any key
/// of the name has an override, or a block (only then does a call look
/// for one).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Named {
    definition: Definition,
    overridden: bool,
    blocks: bool,
}

/// Cached definitions by name (`None`: undefined).
type Names = BoundedCache<Vec<u8>, Option<Named>>;

thread_local! {
    /// Definitions looked up in this backend.
    static CACHE: RefCell<Names> = RefCell::new(Names::new(MAX_CACHED_NAMES, MAX_CACHED_BYTES));
}

/// The most names the cache holds, and the most bytes of names: a backend
/// that looks up many names (or long ones: a name may be 2 kB) drops the
/// whole cache when it is full, so its memory stays bounded (about 1 MiB
/// of names plus the map) however many names it is asked about.
const MAX_CACHED_NAMES: usize = 10_000;
const MAX_CACHED_BYTES: usize = 1 << 20;

/// Registers the cache's invalidation callback; called from `_PG_init`.
pub fn register_cache_invalidation() {
    // SAFETY: the callback only clears a thread-local map; it cannot fail.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(forget_definitions), pg_sys::Datum::from(0))
    };
}

/// Relcache invalidation callback: forgets every cached definition. (Any
/// relation's invalidation clears it; they are rare, and this way no OID
/// needs tracking across DROP/CREATE EXTENSION.)
#[pg_guard]
unsafe extern "C-unwind" fn forget_definitions(_arg: pg_sys::Datum, _relid: pg_sys::Oid) {
    CACHE.with(|cache| {
        if let Ok(mut cache) = cache.try_borrow_mut() {
            cache.clear();
        }
    });
    crate::overrides::forget();
    crate::composites::forget();
    crate::slot_definitions::forget();
    crate::catalog::forget();
}

/// `rate_limiter._invalidate_definitions(relid)`: sends a relcache
/// invalidation for `relid` (the definitions table), from the statement
/// trigger on it. Internal: not granted to anyone. An OID that is not a
/// relation's does nothing (PostgreSQL's own function would raise an
/// internal error for it).
#[pg_extern(sql = false)]
fn _invalidate_definitions(relid: pg_sys::Oid) {
    // An automatic block that changes no backend's cached definitions
    // (crate::blocks::strike) invalidates nothing.
    if crate::blocks::quiet() {
        return;
    }
    // SAFETY: a syscache probe and an invalidation of an existing relation,
    // inside the caller's transaction.
    unsafe {
        // get_rel_relkind: '\0' when no relation has this OID.
        if pg_sys::get_rel_relkind(relid) != 0 {
            pg_sys::CacheInvalidateRelcacheByRelid(relid);
        }
    }
}

/// The config a call of (`name`, `key`) uses (docs/overrides.md,
/// "Precedence"): `inline` when given (enforcing), else the key's
/// override that has not expired, else the definition of `name`, else a
/// 42704 error naming the limit (a misspelled name is never a silent new
/// limit).
///
/// An inline config is for names without a definition. For a defined name
/// it would override the definition, which is managing the limit (it could
/// refill a drained limit, or put a key deep into debt): only a role that
/// may call `define` may do that (the caller's role, `GetUserId()`: calls
/// resolve before acting as the owner). An inline config has at most
/// `rate_limiter.max_inline_shards` shards.
///
/// Errors: 42704 (neither, or an override's plan that is gone); 42501 (an
/// inline config for a defined name from a role that may not call
/// `define`); 54000 (too many shards).
pub fn resolve(
    name: &[u8],
    key: Option<&[u8]>,
    inline: Option<Config>,
) -> Result<Definition, CallError> {
    let (definition, blockable) = configured(name, key, inline)?;
    if blockable {
        blocked(name, key, definition, crate::blocks::find)
    } else {
        Ok(definition)
    }
}

/// [`resolve`] for a call that shows where a limit stands (`status`,
/// `http_headers`): on a cluster the key's block is read on the node that
/// holds it (`crate::blocks::find_anywhere`), not only on this one.
pub fn resolve_shown(
    name: &[u8],
    key: Option<&[u8]>,
    inline: Option<Config>,
) -> Result<Definition, CallError> {
    let (definition, blockable) = configured(name, key, inline)?;
    if blockable {
        blocked(name, key, definition, crate::blocks::find_anywhere)
    } else {
        Ok(definition)
    }
}

/// [`resolve`] but for the key's block: the definition (not blocked), and
/// whether the key may be blocked (the name has blocks, or the config
/// has automatic blocks: then [`blocked`] looks).
fn configured(
    name: &[u8],
    key: Option<&[u8]>,
    inline: Option<Config>,
) -> Result<(Definition, bool), CallError> {
    match inline {
        Some(config) => {
            let most = crate::settings::max_inline_shards();
            if config.shards > most {
                return Err(CallError::TooMuchWork(format!(
                    "an inline config may have at most {most} shards (rate_limiter.max_inline_shards), not {}",
                    config.shards
                )));
            }
            let named = lookup_named(name)?;
            if named.is_some() && !may_define() {
                return Err(CallError::OverrideNotAllowed(name.to_vec()));
            }
            let definition = Definition {
                config,
                enforce: true,
                regime: None,
                blocked_until: None,
            };
            let blockable = named.is_some_and(|named| named.blocks) || config.block.is_some();
            Ok((definition, blockable))
        }
        None => {
            let named = lookup_named(name)?.ok_or_else(|| CallError::Undefined(name.to_vec()))?;
            let definition = match key {
                Some(key) if named.overridden => overridden(name, key, named.definition)?,
                _ => named.definition,
            };
            let blockable = named.blocks || definition.config.block.is_some();
            Ok((definition, blockable))
        }
    }
}

/// `definition` with the end of the block of (`name`, `key`) when the key
/// is blocked now (docs/blocks.md); the block's reason is noted for the
/// refusal's DETAIL (`crate::blocks::note_refusal`).
fn blocked(
    name: &[u8],
    key: Option<&[u8]>,
    definition: Definition,
    find: fn(&[u8], Option<&[u8]>) -> Result<Option<crate::blocks::Block>, CallError>,
) -> Result<Definition, CallError> {
    let Some(block) = find(name, key)? else {
        return Ok(definition);
    };
    if crate::clock::now() >= block.until {
        return Ok(definition);
    }
    crate::blocks::note_refusal(name, key, block.reason);
    Ok(Definition {
        blocked_until: Some(block.until),
        ..definition
    })
}

/// The definition that applies to `key` of `name` (defined as
/// `definition`, with overrides): its override while in force (the
/// clock's now is before `expires_at`), else `definition`.
fn overridden(name: &[u8], key: &[u8], definition: Definition) -> Result<Definition, CallError> {
    let Some(found) = crate::overrides::find(name, key)? else {
        return Ok(definition);
    };
    if !found.in_force(crate::clock::now()) {
        return Ok(definition);
    }
    let (config, enforce) = match (&found.plan, found.config) {
        (Some(plan), _) => {
            let plan = lookup(plan)?.ok_or_else(|| CallError::Undefined(plan.clone()))?;
            (plan.config, found.enforce.unwrap_or(plan.enforce))
        }
        (None, Some(config)) => (config, found.enforce.unwrap_or(definition.enforce)),
        (None, None) => return Ok(definition),
    };
    let regime = crate::overrides::regime(&config, &definition.config);
    if regime.is_some() && !crate::catalog::objects().regime_column {
        return Err(CallError::NeedsUpdate("overrides"));
    }
    Ok(Definition {
        config,
        enforce,
        regime,
        blocked_until: None,
    })
}

/// The regime of the rows of (`name`, `key`) when called without an
/// inline config: where a node reads rows for another that resolved the
/// call (Citus's `_rate_state_at`). `None` when the name is undefined.
pub fn regime_of(name: &[u8], key: Option<&[u8]>) -> Option<i64> {
    resolve(name, key, None)
        .ok()
        .and_then(|definition| definition.regime)
}

/// Whether a new block of `name` needs no backend's cached definition to
/// change: the name has no definition (nothing cached says whether it has
/// blocks), or the cached definition already says it has blocks (ended or
/// not). Then an automatic block invalidates nothing
/// (`crate::blocks::strike`).
pub fn blocks_known(name: &[u8]) -> Result<bool, CallError> {
    Ok(lookup_named(name)?.is_none_or(|named| named.blocks))
}

/// Whether `name` has a definition and a key of it has an override.
pub fn has_overrides(name: &[u8]) -> Result<bool, CallError> {
    Ok(lookup_named(name)?.is_some_and(|named| named.overridden))
}

/// Whether the calling role may call `rate_limiter.define()`.
pub fn may_define() -> bool {
    let define = crate::catalog::objects().define;
    // SAFETY: an ACL check inside the caller's transaction.
    define != pg_sys::InvalidOid
        && unsafe { crate::compat::may_execute(define, pg_sys::GetUserId()) }
}

/// Called by a consuming call once it holds its rows, before it decides:
/// whether `used`, the definition it resolved for (`name`, `key`)
/// (`inline` = the caller's inline config), is still the one in force
/// (config, enforcement and regime: a key's override may have been set,
/// removed or have expired meanwhile). A `define` that
/// committed while the call waited for a row has sent an invalidation,
/// processed here; then the definition is read again.
///
/// Errors: [`CallError::DefinitionChanged`] when the definition changed
/// (the call starts again, so it never writes state under a replaced
/// definition); as [`lookup`].
///
/// `blocks`: whether to look for the key's block too (a call that decides
/// before it waited for anything since it resolved need not: nothing it
/// waited for can have blocked the key; `used` is then not blocked).
pub fn recheck(
    name: &[u8],
    key: Option<&[u8]>,
    inline: Option<Config>,
    used: &Definition,
    blocks: bool,
) -> Result<(), CallError> {
    if inline.is_some() {
        return Ok(());
    }
    let current = if blocks {
        resolve(name, key, None)
    } else {
        configured(name, key, None).map(|(definition, _)| definition)
    };
    match current {
        Ok(current) if current == *used => Ok(()),
        Err(error @ CallError::Spi(_)) => Err(error),
        _ => Err(CallError::DefinitionChanged(name.to_vec())),
    }
}

/// How often a call starts again because its definition changed while it
/// waited ([`recheck`]) before it gives up with 40001.
pub const MAX_RESTARTS: usize = 16;

/// Runs `call` until it does not fail with
/// [`CallError::DefinitionChanged`], at most [`MAX_RESTARTS`] + 1 times;
/// then that error (40001) is returned.
pub fn restarting<T>(mut call: impl FnMut() -> Result<T, CallError>) -> Result<T, CallError> {
    let mut restarts = 0;
    loop {
        match call() {
            Err(CallError::DefinitionChanged(_)) if restarts < MAX_RESTARTS => restarts += 1,
            other => return other,
        }
    }
}

/// Whether `name` has a definition ([`lookup`], cached: a call that just
/// resolved `name` looked it up already). False when it cannot be read.
pub fn is_defined(name: &[u8]) -> bool {
    matches!(lookup(name), Ok(Some(_)))
}

/// Whether `name` is known to have no definition: an earlier lookup in
/// this backend found none, and no change since says otherwise (a call of
/// it as a limit can only fail with 42704). False when not known.
pub fn known_undefined(name: &[u8]) -> bool {
    // SAFETY: processes pending invalidations; cheap when there are none.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    CACHE.with(|cache| matches!(cache.borrow().get(name), Some(None)))
}

/// The validated definition of the limit `name`, or `None` when there is
/// no definition of that name; cached (see the module documentation).
/// Without the key's override: a call resolves with [`resolve`].
pub fn lookup(name: &[u8]) -> Result<Option<Definition>, CallError> {
    Ok(lookup_named(name)?.map(|named| named.definition))
}

/// [`lookup`], with whether the name has overrides.
fn lookup_named(name: &[u8]) -> Result<Option<Named>, CallError> {
    crate::named_lookup::looked_up(&CACHE, name, |client| lookup_uncached(client, name))
}

/// Reads the definition from the table. A stored definition is validated
/// again (a superuser may have written the table by hand).
fn lookup_uncached(client: &SpiClient<'_>, name: &[u8]) -> Result<Option<Named>, CallError> {
    let objects = crate::catalog::objects();
    let lookup = if objects.overrides != pg_sys::InvalidOid {
        if crate::blocks::held_by_cluster() {
            LOOKUP_BLOCKS_SPREAD
        } else {
            LOOKUP
        }
    } else if objects.enforce_column {
        LOOKUP_BEFORE_0_6
    } else {
        LOOKUP_BEFORE_0_4
    };
    let plan = kept_plan(client, lookup, &[TEXT], false)?;
    let table = client.select(plan, Some(1), &[text_argument(name)])?;
    if table.is_empty() {
        return Ok(None);
    }
    let row = table.first();
    let label: String = required(row.get(1)?, "kind")?;
    let kind = Kind::from_label(&label).ok_or_else(|| crate::config::unknown_kind(&label))?;
    let values = ConfigValues {
        kind,
        rate: required(row.get(2)?, "rate")?,
        period: required(row.get(3)?, "period")?,
        capacity: row.get(4)?,
        max_reserved: row.get(5)?,
        shards: required(row.get(6)?, "shards")?,
        start: row.get(7)?,
        block_for: row.get(11)?,
        max_block: row.get(12)?,
        forget_after: row.get(13)?,
        time_zone: row
            .get::<String>(14)?
            .map(|zone| crate::calendar::zone(&zone))
            .transpose()?,
    };
    Ok(Some(Named {
        definition: Definition {
            config: values.to_config()?,
            enforce: required(row.get(8)?, "enforce")?,
            regime: None,
            blocked_until: None,
        },
        overridden: required(row.get(9)?, "overridden")?,
        blocks: required(row.get(10)?, "blocks")?,
    }))
}
