//! `rate_limiter.rate_limit_all()`: several limits at once, all or nothing.
//! Every request is admitted and consumed, or nothing is consumed.
//!
//! Order of work: argument checks (22004 for a NULL array, element, name,
//! reserve or throws), each request's config (inline, else the definition,
//! else 42704) and count (22023), then every row locked in one fixed order
//! (`storage/all_or_nothing.rs`), the clock read once, the math
//! (`rate_limiter_algorithm::evaluate_all_or_nothing`: the requests in the
//! order given, a limit named twice charged twice), and the writes. A
//! refusal with `throws => true` is raised last, for the first refused
//! request.

use crate::clock;
use crate::config::{inline_config, required};
use crate::definitions::{self, Definition};
use crate::errors::{report, CallError, Refusal};
use crate::result_row;
use crate::stats::{self, Counted};
use crate::storage::{self, RowId};
use pgrx::fcinfo::{pg_getarg, pg_getarg_datum};
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::{
    evaluate_all_or_nothing, near_limit, Answer, Config, ErrorKind, Limit, LimitError, LimitId,
    Member, Request, State, Verdict,
};
use std::collections::HashMap;

/// One element of the `requests` array (`rate_limiter.request`), checked.
pub(crate) struct RequestArgument {
    pub(crate) name: Vec<u8>,
    pub(crate) key: Option<Vec<u8>>,
    /// NULL means 1.
    pub(crate) count: f64,
    /// The inline config, if any.
    pub(crate) inline: Option<Config>,
    /// The config in force: `inline`, else the definition.
    pub(crate) config: Config,
    /// Whether its limit enforces (`false`: shadow mode).
    pub(crate) enforce: bool,
    /// The element as it came (a `rate_limiter.request` datum, valid for
    /// the call), to pass on to another node (`crate::citus`).
    pub(crate) element: pg_sys::Datum,
}

/// A NULL where a value is required, naming the array element.
fn null_in(position: usize, field: &str) -> CallError {
    CallError::Limit(LimitError {
        kind: ErrorKind::NullValue,
        parameter: "requests",
        message: format!("requests[{position}]{field} must not be NULL"),
    })
}

/// Reads the `rate_limiter.request[]` argument: (name, key, count, config)
/// per element, in order. Positions in messages are 1-based, as SQL
/// subscripts are (for an array with the default lower bound).
///
/// Errors: 22004 for a NULL element or name; 22023 for an invalid inline
/// config; then (once every element is checked) 42704 for a name without
/// config or definition.
pub(crate) fn read_requests(array: pg_sys::Datum) -> Result<Vec<RequestArgument>, CallError> {
    // SAFETY: PostgreSQL passes a rate_limiter.request[] for this argument
    // (sql/functions.sql); deconstruct_array gives its elements (composite
    // datums), whose attributes are name text, key text, count float8,
    // config rate_limiter.config.
    let elements = unsafe {
        let array = pg_sys::pg_detoast_datum(array.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let element_type = (*array).elemtype;
        let (mut length, mut by_value, mut align) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(element_type, &mut length, &mut by_value, &mut align);
        let mut values: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut count = 0;
        pg_sys::deconstruct_array(
            array,
            element_type,
            i32::from(length),
            by_value,
            align,
            &mut values,
            &mut nulls,
            &mut count,
        );
        let count = count.max(0) as usize;
        let most = crate::settings::max_requests();
        if count > most {
            return Err(CallError::TooMuchWork(format!(
                "rate_limit_all() takes at most {most} requests (rate_limiter.max_requests), not {count}"
            )));
        }
        if count == 0 {
            Vec::new()
        } else {
            let values = std::slice::from_raw_parts(values, count);
            let nulls = std::slice::from_raw_parts(nulls, count);
            values
                .iter()
                .zip(nulls)
                .map(|(value, null)| (!*null).then_some(*value))
                .collect::<Vec<_>>()
        }
    };
    let mut requests = Vec::with_capacity(elements.len());
    for (index, element) in elements.into_iter().enumerate() {
        let position = index + 1;
        let element = element.ok_or_else(|| null_in(position, ""))?;
        // SAFETY: as above; the attributes are read and copied here.
        let (name, key, count, inline) = unsafe {
            let header =
                pg_sys::pg_detoast_datum(element.cast_mut_ptr()) as pg_sys::HeapTupleHeader;
            let attribute = |number: i16| {
                let mut is_null = false;
                let datum = pg_sys::GetAttributeByNum(header, number, &mut is_null);
                (datum, is_null)
            };
            let (name, name_null) = attribute(1);
            let (key, key_null) = attribute(2);
            let (count, count_null) = attribute(3);
            let (config, config_null) = attribute(4);
            (
                // Vec<u8> copies the bytes of any varlena (text here).
                Vec::<u8>::from_datum(name, name_null),
                Vec::<u8>::from_datum(key, key_null),
                f64::from_datum(count, count_null),
                PgHeapTuple::<AllocatedByRust>::from_datum(config, config_null),
            )
        };
        let name = name.ok_or_else(|| null_in(position, ".name"))?;
        requests.push((name, key, count, inline_config(inline)?, element));
    }
    // Every argument is checked before any name is looked up.
    requests
        .into_iter()
        .map(|(name, key, count, inline, element)| {
            let definition = definitions::resolve(&name, inline)?;
            Ok(RequestArgument {
                name,
                key,
                count: count.unwrap_or(1.0),
                inline,
                config: definition.config,
                enforce: definition.enforce,
                element,
            })
        })
        .collect()
}

/// The limits the requests name, each once (a limit named twice must have
/// the same config both times), and each request as a member of them.
fn group<'a>(
    requests: &[&'a RequestArgument],
    reserve: bool,
) -> Result<(Vec<Limit<'a>>, Vec<Member>), CallError> {
    let mut limits: Vec<Limit<'a>> = Vec::new();
    // Where each limit is in `limits`.
    let mut seen: HashMap<LimitId<'a>, usize> = HashMap::with_capacity(requests.len());
    let mut members = Vec::with_capacity(requests.len());
    for (index, request) in requests.iter().enumerate() {
        request.config.validate_count(request.count, reserve)?;
        let id = LimitId {
            name: &request.name,
            key: request.key.as_deref(),
        };
        let limit = match seen.get(&id).copied() {
            Some(limit)
                if limits[limit].config != request.config
                    || limits[limit].enforce != request.enforce =>
            {
                return Err(CallError::Limit(LimitError::invalid(
                    "requests",
                    format!(
                        "requests[{}] names the same limit as an earlier request with a different config",
                        index + 1
                    ),
                )));
            }
            Some(limit) => limit,
            None => {
                limits.push(Limit {
                    id,
                    config: request.config,
                    stored: vec![None; request.config.shards.max(1) as usize],
                    enforce: request.enforce,
                });
                seen.insert(id, limits.len() - 1);
                limits.len() - 1
            }
        };
        members.push(Member {
            limit,
            request: Request {
                count: request.count,
                reserve,
            },
        });
    }
    Ok((limits, members))
}

/// What a call answers: one [`Answer`] per request, in request order, and
/// for each request whether it was *contended* (see [`consume`]).
pub(crate) type Answers = (Vec<Answer>, Vec<bool>);

/// Locks, decides and writes (see the module documentation), on the state
/// table or, on a distributed install, in the shard relation `crate::citus`
/// routes storage to (every request's rows are in it); the answers in
/// request order, and for each request whether it was *contended*: its
/// limit is sharded and the call waited for another transaction to get
/// one of its shards (`rate_limit_all` holds every shard it may use, so it
/// waits for busy ones rather than passing over them).
pub(crate) fn consume(requests: &[&RequestArgument], reserve: bool) -> Result<Answers, CallError> {
    let (mut limits, members) = group(requests, reserve)?;
    let mut rows: Vec<RowId<'_>> = limits
        .iter()
        .flat_map(|limit| {
            (0..limit.stored.len()).map(move |shard| RowId {
                name: limit.id.name,
                key: limit.id.key,
                shard: shard as i16,
            })
        })
        .collect();
    storage::sort_rows(&mut rows);
    // Where each (limit, shard) is in the sorted rows.
    let position = |name: &[u8], key: Option<&[u8]>, shard: usize| {
        rows.binary_search_by(|row| (row.name, row.key, row.shard).cmp(&(name, key, shard as i16)))
            .ok()
    };
    let positions: Vec<Vec<Option<usize>>> = limits
        .iter()
        .map(|limit| {
            (0..limit.stored.len())
                .map(|shard| position(limit.id.name, limit.id.key, shard))
                .collect()
        })
        .collect();
    // Missing shards each limit may consume from (see
    // storage::consume_all_or_nothing): two per request naming it.
    let mut missing_held: HashMap<LimitId<'_>, usize> = HashMap::with_capacity(limits.len());
    for member in &members {
        let limit = &limits[member.limit];
        let held = missing_held.entry(limit.id).or_insert(0);
        *held = (*held + 2).min(limit.stored.len());
    }
    let missing_held = |row: RowId<'_>| {
        missing_held
            .get(&LimitId {
                name: row.name,
                key: row.key,
            })
            .copied()
            .unwrap_or(0)
    };
    storage::consume_all_or_nothing(
        &rows,
        missing_held,
        |stored: &[Option<State>], waited: &[bool]| {
            let contended: Vec<bool> = members
                .iter()
                .map(|member| {
                    limits[member.limit].stored.len() > 1
                        && positions[member.limit]
                            .iter()
                            .flatten()
                            .any(|&position| waited.get(position).copied().unwrap_or(false))
                })
                .collect();
            // Every definition used is still the one in force (a define may
            // have committed while the call waited for a row).
            for request in requests {
                let used = Definition {
                    config: request.config,
                    enforce: request.enforce,
                };
                definitions::recheck(&request.name, request.inline, &used)?;
            }
            for (limit, positions) in limits.iter_mut().zip(&positions) {
                for (slot, position) in limit.stored.iter_mut().zip(positions) {
                    *slot = position.and_then(|p| stored.get(p).copied().flatten());
                }
            }
            let outcome = evaluate_all_or_nothing(&limits, &members, clock::now())?;
            let writes = outcome.new_states.map(|new_states| {
                let mut writes = vec![None; stored.len()];
                for (states, positions) in new_states.iter().zip(&positions) {
                    for (state, position) in states.iter().zip(positions) {
                        if let (Some(state), Some(position)) = (state, position) {
                            writes[*position] = Some(*state);
                        }
                    }
                }
                writes
            });
            Ok(((outcome.answers, contended), writes))
        },
    )
}

/// The arguments of a call, its answers and whether each was contended
/// (see [`consume`]; after a restart, as the last try found it), or why it
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
    // Inside a Citus shard query nothing else may run first (reading the
    // definitions there is itself a distributed query: see
    // `limit::consume`).
    if crate::catalog::objects().distributed {
        crate::citus::before_call("rate_limit_all()")?;
    }
    let mut requests = read_requests(requests)?;
    // 25006 before the call goes anywhere (see `limit::consume`).
    // SAFETY: reads the transaction state; raises an ERROR when read-only.
    unsafe { pg_sys::PreventCommandIfReadOnly(c"rate_limit_all()".as_ptr()) };
    let (answers, contended) =
        restarting(&mut requests, |requests| {
            match crate::citus::distribution() {
                None => consume(requests, reserve),
                Some(_) => crate::citus::all_or_nothing::consume(requests, reserve),
            }
        })?;
    Ok((requests, answers, contended, throws))
}

/// Runs `consume` on the requests, and again, every definition resolved
/// again, when a definition changed under it
/// (`definitions::restarting`).
pub(crate) fn restarting(
    requests: &mut [RequestArgument],
    consume: impl Fn(&[&RequestArgument]) -> Result<Answers, CallError>,
) -> Result<Answers, CallError> {
    let mut first = true;
    definitions::restarting(|| {
        // A restart resolves every definition again.
        if !std::mem::take(&mut first) {
            for request in requests.iter_mut() {
                let definition = definitions::resolve(&request.name, request.inline)?;
                request.config = definition.config;
                request.enforce = definition.enforce;
            }
        }
        let requests: Vec<&RequestArgument> = requests.iter().collect();
        consume(&requests)
    })
}

/// How the answer to `request` is counted in `rate_limiter.stats`: as
/// answered, and as contended when it waited for a shard of its sharded
/// limit. (In a call refused as a whole, the caller counts only the
/// refused requests: the others consumed nothing.)
fn counted(request: &RequestArgument, answer: &Answer, contended: bool) -> Counted {
    let admitted = answer.verdict == Verdict::Admitted;
    Counted {
        verdict: answer.verdict,
        count: request.count,
        reserved: admitted && answer.retry_after.is_some_and(|micros| micros > 0),
        near_limit: admitted && near_limit(&request.config, answer.remaining),
        contended,
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
    // (SPEC §11), not the requests that alone could have been admitted.
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
                Refusal::new(
                    &request.name,
                    request.key.as_deref(),
                    answer.retry_after.unwrap_or(0),
                    answer.remaining,
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
                .map(Interval::from_micros)
                .and_then(IntoDatum::into_datum),
            answer.remaining.into_datum(),
        ]
    });
    result_row::put_rows(fcinfo, rows)
}

#[no_mangle]
pub extern "C" fn pg_finfo_rate_limit_all_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}
