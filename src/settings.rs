//! The extension's settings (GUCs).
//!
//! - `rate_limiter.now_override` (superuser only): a `timestamptz` literal
//!   that replaces the clock, for deterministic tests; empty means the real
//!   clock. Parsed once when set; infinite or unparsable values are refused.
//! - `rate_limiter.sqlstate` (anyone): the SQLSTATE raised by
//!   `throws => true` (default `RL429`); exactly five characters of `0-9A-Z`,
//!   not of a class in [`REFUSED_CLASSES`]. Anything else is refused when
//!   set (`22023`).
//! - `rate_limiter.random_seed` (superuser only): an integer that seeds the
//!   choice of shards, so that a session's sequence of choices repeats
//!   (for deterministic tests); empty means real randomness.
//!
//! - `rate_limiter.max_requests` (superuser only, default 1,000): the most
//!   requests one `rate_limit_all` call takes (`54000` beyond).
//! - `rate_limiter.max_inline_shards` (superuser only, default 64): the
//!   most shards an inline config may have (`54000` beyond): a definition
//!   may have more, since only a role that may `define` makes one.
//! - `rate_limiter.lock_free_refusals` (superuser only, default on): a call
//!   that the committed state already refuses answers without taking the
//!   row lock (refusals never wait: docs/guarantees.md, "Concurrency and
//!   exactness"). Off, every consuming call locks its rows first, as before
//!   0.6.0: for benchmarks and tests that compare the two.
//!
//! All are validated by check hooks and decoded once into per-backend
//! caches by assign hooks, so reading them on every call costs nothing.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr, CString};

/// The SQLSTATE raised by refused calls with `throws => true`, unless set.
pub const DEFAULT_SQLSTATE: &CStr = c"RL429";

static NOW_OVERRIDE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static RANDOM_SEED: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static MAX_REQUESTS: GucSetting<i32> = GucSetting::<i32>::new(1000);
static MAX_INLINE_SHARDS: GucSetting<i32> = GucSetting::<i32>::new(64);
static LOCK_FREE_REFUSALS: GucSetting<bool> = GucSetting::<bool>::new(true);
static SQLSTATE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(DEFAULT_SQLSTATE));

thread_local! {
    /// Decoded `rate_limiter.now_override`: microseconds since 2000-01-01.
    static NOW_OVERRIDE_MICROS: Cell<Option<i64>> = const { Cell::new(None) };
    /// Decoded `rate_limiter.sqlstate`, as PostgreSQL's packed error code.
    static SQLSTATE_CODE: Cell<i32> = const { Cell::new(0) };
}

/// Registers the GUCs; called from `_PG_init`.
pub fn register() {
    SQLSTATE_CODE.with(|code| code.set(encode_sqlstate(DEFAULT_SQLSTATE.to_bytes())));
    // SAFETY: the hooks are `#[pg_guard]`ed and do not panic on any input.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"rate_limiter.now_override",
            c"Replaces the clock of the rate limiter (superuser only, for tests).",
            c"A timestamptz literal; empty means the real clock (clock_timestamp()).",
            &NOW_OVERRIDE,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_now_override),
            Some(assign_now_override),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"rate_limiter.sqlstate",
            c"SQLSTATE raised when a call with throws => true is refused.",
            c"Five characters of 0-9A-Z, e.g. RL429 (default) or PT429 for PostgREST's HTTP 429; not of class 00, 01, 02, 08, 25, 40, 53, 57, 58 or XX.",
            &SQLSTATE,
            GucContext::Userset,
            GucFlags::default(),
            Some(check_sqlstate),
            Some(assign_sqlstate),
            None,
        );
        GucRegistry::define_string_guc_with_hooks(
            c"rate_limiter.random_seed",
            c"Seeds the rate limiter's choice of shards (superuser only, for tests).",
            c"An integer; setting it starts the session's sequence of shard choices again from that seed. Empty means real randomness.",
            &RANDOM_SEED,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_random_seed),
            Some(assign_random_seed),
            None,
        );
        GucRegistry::define_int_guc(
            c"rate_limiter.max_requests",
            c"The most requests one rate_limit_all() call takes (superuser only).",
            c"A call with more fails with SQLSTATE 54000 and consumes nothing.",
            &MAX_REQUESTS,
            1,
            i32::MAX,
            GucContext::Suset,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"rate_limiter.max_inline_shards",
            c"The most shards an inline config may have (superuser only).",
            c"A call whose inline config has more fails with SQLSTATE 54000; definitions are not limited.",
            &MAX_INLINE_SHARDS,
            1,
            i32::from(i16::MAX),
            GucContext::Suset,
            GucFlags::default(),
        );
        GucRegistry::define_bool_guc(
            c"rate_limiter.lock_free_refusals",
            c"Answers a call that the committed state refuses without locking its rows (superuser only).",
            c"Off, every consuming call locks its rows before deciding, and a refusal waits for the transactions holding them (for benchmarks and tests).",
            &LOCK_FREE_REFUSALS,
            GucContext::Suset,
            GucFlags::default(),
        );
        pg_sys::MarkGUCPrefixReserved(c"rate_limiter".as_ptr());
    }
}

/// `rate_limiter.max_requests`: the most requests of one `rate_limit_all`.
pub fn max_requests() -> usize {
    MAX_REQUESTS.get().max(1) as usize
}

/// `rate_limiter.max_inline_shards`: the most shards of an inline config.
pub fn max_inline_shards() -> i32 {
    MAX_INLINE_SHARDS.get()
}

/// `rate_limiter.lock_free_refusals`: whether a consuming call first
/// decides on the committed state, without a lock, and answers a refusal
/// from it (docs/guarantees.md, "Concurrency and exactness").
pub fn lock_free_refusals() -> bool {
    LOCK_FREE_REFUSALS.get()
}

/// The overridden current time, in microseconds since 2000-01-01, if set.
pub fn now_override() -> Option<i64> {
    NOW_OVERRIDE_MICROS.with(Cell::get)
}

/// The SQLSTATE for refused calls with `throws => true`, packed as
/// PostgreSQL's `MAKE_SQLSTATE` does.
pub fn sqlstate_code() -> i32 {
    SQLSTATE_CODE.with(Cell::get)
}

/// The SQLSTATE classes `rate_limiter.sqlstate` may not be in: success,
/// warning and no data (`00`, `01`, `02`: not errors), and the classes a
/// client or driver treats as retryable or fatal: connection exception
/// (`08`), invalid transaction state (`25`), transaction rollback (`40`:
/// drivers and ORMs retry serialization failures by themselves, and would
/// retry refusals), insufficient resources (`53`), operator intervention
/// (`57`), system error (`58`) and internal error (`XX`).
pub const REFUSED_CLASSES: [&[u8; 2]; 10] = [
    b"00", b"01", b"02", b"08", b"25", b"40", b"53", b"57", b"58", b"XX",
];

/// Whether `text` is a SQLSTATE we accept: five characters of `0-9A-Z`,
/// not of a class in [`REFUSED_CLASSES`].
pub fn is_valid_sqlstate(text: &[u8]) -> bool {
    text.len() == 5
        && text
            .iter()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
        && !REFUSED_CLASSES.iter().any(|class| &text[..2] == *class)
}

/// PostgreSQL's `MAKE_SQLSTATE`: six bits per character.
fn encode_sqlstate(text: &[u8]) -> i32 {
    text.iter()
        .take(5)
        .enumerate()
        .map(|(i, &c)| (i32::from(c.wrapping_sub(b'0')) & 0x3F) << (6 * i))
        .sum()
}

/// Sets the DETAIL of the error PostgreSQL reports when a check hook
/// refuses a value.
unsafe fn set_check_detail(detail: &str) {
    if let Ok(detail) = CString::new(detail) {
        unsafe {
            pg_sys::GUC_check_errdetail_string =
                pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, detail.as_ptr());
        }
    }
}

/// Allocates a GUC "extra" block holding `value`, as the server frees it.
unsafe fn malloc_extra(value: i64) -> *mut c_void {
    unsafe {
        let extra = crate::compat::guc_extra(std::mem::size_of::<i64>()) as *mut i64;
        if !extra.is_null() {
            extra.write(value);
        }
        extra as *mut c_void
    }
}

/// Parses a `timestamptz` literal with PostgreSQL's own input function;
/// `None` when it does not parse or is infinite.
fn parse_timestamptz(text: &CStr) -> Option<i64> {
    let datum = pgrx::PgTryBuilder::new(|| unsafe {
        pgrx::direct_function_call::<TimestampWithTimeZone>(
            pg_sys::timestamptz_in,
            &[
                Some(pg_sys::Datum::from(text.as_ptr())),
                Some(pg_sys::Datum::from(pg_sys::InvalidOid)),
                Some(pg_sys::Datum::from(-1i32)),
            ],
        )
    })
    .catch_others(|_| None)
    .execute()?;
    datum.is_finite().then(|| datum.into_inner())
}

#[pg_guard]
unsafe extern "C-unwind" fn check_now_override(
    newval: *mut *mut c_char,
    extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    unsafe {
        if newval.is_null() || (*newval).is_null() {
            return true;
        }
        let text = CStr::from_ptr(*newval);
        if text.to_bytes().iter().all(u8::is_ascii_whitespace) {
            return true;
        }
        match parse_timestamptz(text) {
            Some(micros) => {
                *extra = malloc_extra(micros);
                !(*extra).is_null()
            }
            None => {
                set_check_detail("rate_limiter.now_override must be a finite timestamptz literal, or empty for the real clock.");
                false
            }
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_now_override(_newval: *const c_char, extra: *mut c_void) {
    let micros = if extra.is_null() {
        None
    } else {
        Some(unsafe { *(extra as *const i64) })
    };
    NOW_OVERRIDE_MICROS.with(|cell| cell.set(micros));
}

#[pg_guard]
unsafe extern "C-unwind" fn check_sqlstate(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let text = unsafe {
        if newval.is_null() || (*newval).is_null() {
            &[][..]
        } else {
            CStr::from_ptr(*newval).to_bytes()
        }
    };
    if is_valid_sqlstate(text) {
        true
    } else {
        unsafe {
            set_check_detail("rate_limiter.sqlstate must be five characters of 0-9 and A-Z, e.g. RL429 or PT429, and not of a class that means success, a warning, no data, or an error clients retry or treat as fatal (00, 01, 02, 08, 25, 40, 53, 57, 58, XX).");
        }
        false
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_sqlstate(newval: *const c_char, _extra: *mut c_void) {
    if newval.is_null() {
        return;
    }
    let text = unsafe { CStr::from_ptr(newval) }.to_bytes();
    SQLSTATE_CODE.with(|code| code.set(encode_sqlstate(text)));
}

/// The seed in a `rate_limiter.random_seed` value: `Ok(None)` for empty,
/// `Err` when it is not an integer.
fn parse_seed(newval: *const c_char) -> Result<Option<i64>, ()> {
    if newval.is_null() {
        return Ok(None);
    }
    let text = unsafe { CStr::from_ptr(newval) }.to_string_lossy();
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<i64>().map(Some).map_err(|_| ())
}

#[pg_guard]
unsafe extern "C-unwind" fn check_random_seed(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    let value = if newval.is_null() {
        std::ptr::null()
    } else {
        unsafe { *newval }
    };
    if parse_seed(value).is_ok() {
        true
    } else {
        unsafe {
            set_check_detail("rate_limiter.random_seed must be an integer (a 64-bit seed), or empty for real randomness.");
        }
        false
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn assign_random_seed(newval: *const c_char, _extra: *mut c_void) {
    crate::shard_choice::reseed(parse_seed(newval).unwrap_or(None));
}
