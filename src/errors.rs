//! Turning errors and refusals into PostgreSQL errors.
//!
//! Standard SQLSTATEs go through pgrx's `ErrorReport`. The refusal of a
//! call with `throws => true` uses a custom SQLSTATE (`rate_limiter.sqlstate`,
//! default `RL429`), which pgrx cannot raise (it maps unknown codes to
//! XX000), so [`raise_refused`] calls PostgreSQL's `errstart` ... `errfinish`
//! itself, as the very last step of a call.

use crate::names;
use crate::settings;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};
use rate_limiter_algorithm::{ErrorKind, LimitError, Micros, MICROS_PER_MILLISECOND};
use serde::Serialize;
use std::ffi::{c_char, c_int};

/// Why a call failed (as opposed to being refused).
#[derive(Debug)]
pub enum CallError {
    /// Bad input or an out-of-range result.
    Limit(LimitError),
    /// No inline config and no definition of this name (SQLSTATE 42704);
    /// the name as bytes.
    Undefined(Vec<u8>),
    /// SPI failed to prepare or run one of our statements (SQLSTATE XX000).
    Spi(pgrx::spi::SpiError),
    /// The row changed after the snapshot of a REPEATABLE READ or
    /// SERIALIZABLE transaction (SQLSTATE 40001); the message says how.
    SerializationFailure(&'static str),
    /// The definition of this name (bytes) changed while the call waited
    /// for its rows; the call starts again (`definitions::restarting`), and
    /// reports 40001 only when it keeps changing.
    DefinitionChanged(Vec<u8>),
    /// An inline config for a defined name (bytes) from a role that may not
    /// call `define` (SQLSTATE 42501).
    OverrideNotAllowed(Vec<u8>),
    /// More work than a setting allows (SQLSTATE 54000); the message says
    /// which.
    TooMuchWork(String),
    /// Statistics were asked for, but the library was not preloaded
    /// (SQLSTATE 55000).
    StatisticsOff,
    /// A feature (named) needs the tables of the library's version: the
    /// database still has an older version's (SQLSTATE 55000).
    NeedsUpdate(&'static str),
    /// The cluster that stores the state table's rows (the one installed
    /// in `crate::placement`, Citus's) cannot make the call as asked: its
    /// own error, which says its SQLSTATE, message and hint.
    Cluster(Box<dyn ClusterError>),
    /// The state table's rows are stored in other relations, and a call
    /// reached the table itself (SQLSTATE 55000), when no cluster layer
    /// explains it better (`storage::target::explain_elsewhere_with`).
    StoredElsewhere,
    /// A call was to write a key's block on a node that does not hold the
    /// key's blocks (SQLSTATE 55000): it fails closed.
    BlocksElsewhere,
    /// A limit's shards were found in places for a number of shards that
    /// its definition no longer has, or a call asked for all of them where
    /// they are not all stored (SQLSTATE 55000).
    PlacesChanged,
    /// A delegated internal function was given another node's
    /// `now_override` by a role that is not a superuser (SQLSTATE 42501).
    ClockNotAllowed,
    /// A delegated internal function that does what a public
    /// function does (named, e.g. `rate_limiter.rate_credit()`) was called
    /// by a role that may not call that function (SQLSTATE 42501).
    NotAllowed(&'static str),
    /// A managing function (named, e.g. `rate_limiter.override()`) was
    /// called by a role that may not call `rate_limiter.define()`
    /// (SQLSTATE 42501).
    ManagingOnly(&'static str),
    /// `undefine` of a limit (bytes) that is the plan of overrides
    /// (SQLSTATE 2BP01).
    PlanInUse(Vec<u8>),
    /// `undefine` of a limit (name as bytes) that a composite names as a
    /// member (SQLSTATE 2BP01, docs/composites.md).
    MemberInUse(Vec<u8>),
}

/// An error of the cluster layer, as [`report`] raises it.
pub trait ClusterError: std::fmt::Debug {
    /// The SQLSTATE, message and hint.
    fn parts(&self) -> (PgSqlErrorCode, String, Option<String>);
    /// The DETAIL, if any.
    fn detail(&self) -> Option<String> {
        None
    }
}

impl From<LimitError> for CallError {
    fn from(error: LimitError) -> Self {
        CallError::Limit(error)
    }
}

impl From<pgrx::spi::SpiError> for CallError {
    fn from(error: pgrx::spi::SpiError) -> Self {
        CallError::Spi(error)
    }
}

/// Raises `error` as a PostgreSQL ERROR with its SQLSTATE; never returns.
pub fn report(error: CallError) -> ! {
    let detail = match &error {
        CallError::Cluster(error) => error.detail(),
        _ => None,
    };
    let (code, message, hint) = match error {
        CallError::Limit(error) => {
            let code = match error.kind {
                ErrorKind::NullValue => PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                ErrorKind::InvalidParameter => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                ErrorKind::OutOfRange => PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
                ErrorKind::TimestampOutOfRange => PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            };
            (code, error.message, error.hint.map(str::to_string))
        }
        CallError::Undefined(name) => (
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("rate limit \"{}\" is not defined", names::for_message(&name)),
            Some("Define it with rate_limiter.define(), or pass config => rate_limiter.token_bucket(...) or rate_limiter.fixed_window(...).".to_string()),
        ),
        CallError::Spi(error) => (
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("rate limiter storage failed: {error}"),
            None,
        ),
        CallError::OverrideNotAllowed(name) => (
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "permission denied to override the definition of rate limit \"{}\" with an inline config",
                names::for_message(&name)
            ),
            Some("The limit is defined: call it without config => ..., or ask a role that may call rate_limiter.define() to change the definition.".to_string()),
        ),
        CallError::TooMuchWork(message) => (
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            message,
            None,
        ),
        CallError::DefinitionChanged(name) => (
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            format!(
                "the definition of rate limit \"{}\" kept changing during the call",
                names::for_message(&name)
            ),
            Some("Retry the transaction.".to_string()),
        ),
        CallError::SerializationFailure(message) => (
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            message.to_string(),
            None,
        ),
        CallError::NeedsUpdate(feature) => (
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("{feature} needs the extension's current version in this database"),
            Some("Run ALTER EXTENSION rate_limiter UPDATE.".to_string()),
        ),
        CallError::Cluster(error) => error.parts(),
        CallError::StoredElsewhere => (
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "rate_limiter.rate_limits does not store its rows on this node".to_string(),
            Some("Install the library with the same version on every node, with the same shared_preload_libraries.".to_string()),
        ),
        CallError::BlocksElsewhere => (
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "rate_limiter.blocks does not hold this key's blocks on this node".to_string(),
            Some("Retry the transaction (a shard move may have been under way).".to_string()),
        ),
        CallError::PlacesChanged => (
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "the definition of this limit changed during the call".to_string(),
            Some("Retry the transaction.".to_string()),
        ),
        CallError::ClockNotAllowed => (
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            "permission denied to set rate_limiter.now_override".to_string(),
            Some("Only a superuser may replace the clock; pass now_override => NULL.".to_string()),
        ),
        CallError::NotAllowed(function) => (
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("permission denied: this internal function does what {function} does, which the current role may not call"),
            Some(format!("Grant EXECUTE on {function} to the role on every node, and call that function instead.")),
        ),
        CallError::ManagingOnly(function) => (
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("permission denied for {function}: it manages limits, and the current role may not call rate_limiter.define()"),
            Some("Call it as a role that may call rate_limiter.define() (the README's admin role).".to_string()),
        ),
        CallError::PlanInUse(name) => (
            PgSqlErrorCode::ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST,
            format!("rate limit \"{}\" is the plan of overrides", names::for_message(&name)),
            Some("Remove those overrides first (rate_limiter.remove_override(), or override() with another plan); SELECT name, key FROM rate_limiter.overrides WHERE plan = ... lists them.".to_string()),
        ),
        CallError::MemberInUse(name) => (
            PgSqlErrorCode::ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST,
            format!("rate limit \"{}\" is a member of a composite", names::for_message(&name)),
            Some("Undefine the composite first, or define_all() it without this member; SELECT name FROM rate_limiter.composites WHERE ... = ANY (members) lists them.".to_string()),
        ),
        CallError::StatisticsOff => (
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "rate_limiter statistics are off: the library was not loaded at server start".to_string(),
            Some("Add rate_limiter to shared_preload_libraries in postgresql.conf and restart the server.".to_string()),
        ),
    };
    let mut report = ErrorReport::new(code, message, "rate_limiter");
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

/// The JSON object in the DETAIL of a refused call with `throws => true`.
#[derive(Serialize)]
struct RefusalDetail {
    name: String,
    key: Option<String>,
    /// Milliseconds; exact (retry_after is a whole number of microseconds).
    retry_after_ms: f64,
    remaining: f64,
    /// `true` when a block refused the call (docs/blocks.md); absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    blocked: Option<bool>,
    /// The block's reason (`null`: none given); absent when not blocked.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<Option<String>>,
}

/// The message, DETAIL (JSON) and HINT of a refused call.
///
/// `blocked`: `Some(reason)` when a block refused the call.
pub fn refusal_texts(
    name: &[u8],
    key: Option<&[u8]>,
    retry_after: Micros,
    remaining: f64,
    blocked: Option<Option<String>>,
) -> (String, String, String) {
    let retry_after_ms = retry_after as f64 / MICROS_PER_MILLISECOND;
    let message = match key {
        Some(key) => format!(
            "rate limit \"{}\" exceeded for key \"{}\"",
            names::for_message(name),
            names::for_message(key)
        ),
        None => format!(
            "rate limit \"{}\" exceeded (global limit)",
            names::for_message(name)
        ),
    };
    let detail = serde_json::to_string(&RefusalDetail {
        name: names::for_json(name),
        key: key.map(names::for_json),
        retry_after_ms,
        remaining: rate_limiter_algorithm::shown(remaining),
        blocked: blocked.is_some().then_some(true),
        reason: blocked,
    })
    .unwrap_or_else(|_| String::from("{}"));
    let detail = if names::json_needs_ascii() {
        names::ascii_json(&detail)
    } else {
        detail
    };
    let hint = format!("Retry after {retry_after_ms} ms.");
    (message, detail, hint)
}

extern "C" {
    fn errstart(elevel: c_int, domain: *const c_char) -> bool;
    fn errcode(sqlerrcode: c_int) -> c_int;
    fn errmsg(fmt: *const c_char, ...) -> c_int;
    fn errdetail(fmt: *const c_char, ...) -> c_int;
    fn errhint(fmt: *const c_char, ...) -> c_int;
}

extern "C-unwind" {
    fn errfinish(filename: *const c_char, lineno: c_int, funcname: *const c_char);
}

/// Copies `text` into memory that PostgreSQL owns (the current memory
/// context), so that nothing owned by Rust is alive when the error jumps.
fn palloc_cstring(text: &str) -> *mut c_char {
    let bytes = text.as_bytes();
    unsafe {
        let copy = pg_sys::palloc(bytes.len() + 1) as *mut u8;
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), copy, bytes.len());
        // text values never contain NUL; cut at one just in case.
        *copy.add(bytes.len()) = 0;
        copy as *mut c_char
    }
}

/// The refusal of a call with `throws => true`, ready to raise: its texts
/// are in memory PostgreSQL owns (the current memory context), so a caller
/// can free everything Rust owns before [`Refusal::raise`] jumps.
pub struct Refusal {
    message: *mut c_char,
    detail: *mut c_char,
    hint: *mut c_char,
}

impl Refusal {
    /// The refusal of (name, key): `retry_after` in microseconds,
    /// `remaining` in tokens; `blocked`: `Some(reason)` when a block
    /// refused it.
    pub fn new(
        name: &[u8],
        key: Option<&[u8]>,
        retry_after: Micros,
        remaining: f64,
        blocked: Option<Option<String>>,
    ) -> Refusal {
        let (message, detail, hint) = refusal_texts(name, key, retry_after, remaining, blocked);
        Refusal {
            message: palloc_cstring(&message),
            detail: palloc_cstring(&detail),
            hint: palloc_cstring(&hint),
        }
    }

    /// A refusal whose texts were made elsewhere (a concurrency limit's,
    /// by sql/concurrency.sql's `_concurrency_refusal`). The copies are
    /// made in the current memory context: call it outside `Spi::connect`,
    /// whose memory is freed when it returns (before the refusal is
    /// raised).
    pub fn from_texts(message: &str, detail: &str, hint: &str) -> Refusal {
        Refusal {
            message: palloc_cstring(message),
            detail: palloc_cstring(detail),
            hint: palloc_cstring(hint),
        }
    }

    /// Raises it: SQLSTATE from `rate_limiter.sqlstate`, a message naming
    /// the limit and key, a JSON DETAIL and a HINT. Never returns.
    ///
    /// Must be the last thing a call does: `errfinish` longjmps past the
    /// Rust frames above, so no value that needs dropping may be alive in
    /// them (it would never be dropped: memory Rust allocated would leak
    /// for the life of the backend).
    pub fn raise(self) -> ! {
        let code = settings::sqlstate_code();
        unsafe {
            if errstart(PgLogLevel::ERROR as c_int, std::ptr::null()) {
                errcode(code);
                errmsg(c"%s".as_ptr(), self.message);
                errdetail(c"%s".as_ptr(), self.detail);
                errhint(c"%s".as_ptr(), self.hint);
                errfinish(
                    c"errors.rs".as_ptr(),
                    line!() as c_int,
                    c"rate_limiter".as_ptr(),
                );
            }
        }
        unreachable!("errfinish(ERROR) does not return")
    }
}

/// Raises the refusal of a call with `throws => true` ([`Refusal`]). Never
/// returns; the caller must hold no value that needs dropping.
pub fn raise_refused(
    name: &[u8],
    key: Option<&[u8]>,
    retry_after: Micros,
    remaining: f64,
    blocked: Option<Option<String>>,
) -> ! {
    Refusal::new(name, key, retry_after, remaining, blocked).raise()
}
