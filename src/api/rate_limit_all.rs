//! `rate_limiter.rate_limit_all()`: several limits at once, all or nothing.
//! Every request is admitted and consumed, or nothing is consumed.
//!
//! Order of work: argument checks (22004 for a NULL array, element, name,
//! reserve or throws), each request's config (inline, else the definition,
//! else 42704) and count (22023), then (`crate::placement`, on this node
//! `local::all_or_nothing`) every row locked in one fixed order, the clock
//! read once, the math and the writes. A refusal with `throws => true` is
//! raised last, for the first refused request.

use crate::call::{read_requests, RequestArgument};
use crate::config::required;
use crate::errors::{report, CallError, Refusal};
use crate::placement;
use crate::result_row;
use crate::stats::{self, Counted};
use pgrx::fcinfo::{pg_getarg, pg_getarg_datum};
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::{near_limit, Answer, Verdict};

/// The arguments of a call, its answers and whether each was contended
/// (see [`crate::call::Answers`]; after a restart, as the last try found it), or why it
/// failed.
#[allow(clippy::type_complexity)]
fn run(
    requests: Option<pg_sys::Datum>,
    reserve: Option<bool>,
    throws: Option<bool>,
) -> Result<(Vec<RequestArgument>, Vec<Answer>, Vec<bool>, bool), CallError> {
    let requests = required(requests, "requests")?;
    let reserve = required(reserve, "reserve")?;
    let throws = required(throws, "throws")?;
    let (requests, (answers, contended)) =
        placement::consume_all(c"rate_limit_all()", || read_requests(requests), reserve)
            .map_err(composite_named)?;
    Ok((requests, answers, contended, throws))
}

/// `error`, but the 42704 of a composite's name (docs/composites.md) is a
/// 22023 that says so: a request names one defined limit.
fn composite_named(error: CallError) -> CallError {
    let CallError::Undefined(name) = &error else {
        return error;
    };
    match crate::composites::find(name) {
        Ok(Some(_)) => CallError::Limit(rate_limiter_algorithm::LimitError::invalid(
            "requests",
            format!(
                "\"{}\" is a composite: a request of rate_limit_all() names one defined limit (name the composite's members, or call rate_limit() of the composite)",
                crate::names::for_message(name)
            ),
        )),
        Ok(None) => error,
        Err(other) => other,
    }
}

/// How the answer to `request` is counted in `rate_limiter.stats`: as
/// answered, and as contended when it waited for a shard of its sharded
/// limit. (In a call refused as a whole, the caller counts only the
/// refused requests: the others consumed nothing.)
pub(crate) fn counted(request: &RequestArgument, answer: &Answer, contended: bool) -> Counted {
    let admitted = answer.verdict == Verdict::Admitted;
    Counted {
        verdict: answer.verdict,
        count: request.count,
        reserved: admitted && answer.retry_after.is_some_and(|micros| micros > 0),
        near_limit: admitted && near_limit(&request.config, answer.remaining),
        contended,
        blocked: answer.verdict == Verdict::Refused && request.blocked_until.is_some(),
    }
}

/// PostgreSQL's "version 1 calling convention" record (what
/// `PG_FUNCTION_INFO_V1` declares in C).
const CALLING_CONVENTION: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// `rate_limiter.rate_limit_all(requests, reserve, throws)`: one row per
/// request, in the given order. See sql/functions.sql. A plain C entry
/// point, like `rate_limit`'s, returning its rows in materialize mode
/// (`result_row`); `name` and `key` go back as the bytes they came in as.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn rate_limit_all_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let outcome = run(
        pg_getarg_datum(fcinfo, 0),
        pg_getarg::<bool>(fcinfo, 1),
        pg_getarg::<bool>(fcinfo, 2),
    );
    let (requests, answers, contended, throws) = match outcome {
        Ok(result) => result,
        Err(error) => report(error),
    };
    // A call refused as a whole consumed nothing: only its refusals count
    // (docs/guarantees.md, "Statistics and shadow mode"), not the requests that alone could have been admitted.
    let refused = answers.iter().any(|answer| !answer.ok);
    for ((request, answer), contended) in requests.iter().zip(&answers).zip(contended) {
        if refused && answer.verdict == Verdict::Admitted {
            continue;
        }
        stats::count(&request.name, counted(request, answer, contended));
    }
    if throws {
        let refusal = requests
            .iter()
            .zip(&answers)
            .find(|(_, answer)| !answer.ok)
            .map(|(request, answer)| {
                // A block's reason is read again for the DETAIL (the call
                // noted only the last blocked request's).
                let blocked = request.blocked_until.map(|_| {
                    crate::blocks::find_anywhere(&request.name, request.key.as_deref())
                        .ok()
                        .flatten()
                        .and_then(|block| block.reason)
                });
                Refusal::new(
                    &request.name,
                    request.key.as_deref(),
                    answer.retry_after.unwrap_or(0),
                    answer.remaining,
                    blocked,
                )
            });
        if let Some(refusal) = refusal {
            // Raising jumps past this frame: free what Rust owns first.
            drop(requests);
            drop(answers);
            refusal.raise();
        }
    }
    let rows = requests.iter().zip(&answers).map(|(request, answer)| {
        [
            request.name.as_slice().into_datum(),
            request.key.as_deref().and_then(IntoDatum::into_datum),
            Some(pg_sys::Datum::from(answer.ok)),
            answer
                .retry_after
                .map(crate::result_row::interval)
                .and_then(IntoDatum::into_datum),
            rate_limiter_algorithm::shown(answer.remaining).into_datum(),
        ]
    });
    result_row::put_rows(fcinfo, rows)
}

#[no_mangle]
pub extern "C" fn pg_finfo_rate_limit_all_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}
