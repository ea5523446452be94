//! One rate-limit call: (state, config, now, request) in, decision out.

use crate::config::{Config, Kind};
use crate::error::LimitError;
use crate::shown::available;
use crate::state::{LimitId, Request, State};
use crate::time::Micros;
use crate::{calendar_window, fixed_window, sliding_window, token_bucket};

/// The outcome of one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// Whether the request is admitted (possibly as a reservation).
    pub ok: bool,
    /// Microseconds from `now`, rounded up, never early. Refused: the
    /// earliest time at which the same call would succeed if nothing else
    /// consumed. Reserved: when the reserved work may run. `None` when
    /// admitted without debt.
    pub retry_after: Option<Micros>,
    /// Tokens left: the new value when admitted (negative while in debt),
    /// the refilled value, unchanged by the call, when refused.
    pub remaining: f64,
    /// The state to store, or `None` when nothing must be written.
    pub new_state: Option<State>,
}

/// Evaluates one call of a limit.
///
/// `stored` is the stored state (`None`: no row yet, which counts as full);
/// `config` must already be valid ([`Config::validate`]); `now` is the
/// current time.
///
/// Errors: `InvalidParameter` for a `count` that is negative, not finite or
/// can never succeed; `OutOfRange` when the resulting value or `retry_after`
/// does not fit (only reachable with extreme configurations).
pub fn evaluate(
    config: &Config,
    id: LimitId<'_>,
    stored: Option<State>,
    now: Micros,
    request: Request,
) -> Result<Decision, LimitError> {
    config.validate_count(request.count, request.reserve)?;
    let state = match stored {
        Some(state) => state,
        None => initial_state(config, id, now),
    };
    let refilled = refill(config, state, now);
    let tokens = tokens(config, refilled, now);
    let value = tokens - request.count;
    if !value.is_finite() {
        return Err(LimitError::out_of_range(
            "count",
            format!(
                "the limit's value would be out of range ({})",
                crate::error::show(value)
            ),
        ));
    }
    // What the call may take: the value, or what is shown of it when that
    // is more, so that a count equal to the shown remaining is admitted
    // (crate::shown).
    let available = available(tokens);
    if request.count <= available {
        return Ok(Decision {
            ok: true,
            retry_after: None,
            remaining: value,
            new_state: Some(take(config, refilled, request.count)),
        });
    }
    let allowed_debt = allowed_debt(config, request.reserve);
    if request.count - available <= allowed_debt {
        // A reservation: the work may run once the debt is paid back (a
        // sliding window: when the same call without reserve would have
        // succeeded, docs/shapes.md).
        let new_state = take(config, refilled, request.count);
        let (base, count) = match config.kind {
            Kind::SlidingWindow => (state, request.count),
            Kind::TokenBucket | Kind::FixedWindow | Kind::CalendarWindow => (new_state, 0.0),
        };
        return Ok(Decision {
            ok: true,
            retry_after: Some(earliest(config, base, count, 0.0, now, Admission::Shown)?),
            remaining: value,
            new_state: Some(new_state),
        });
    }
    // Refused: the same call succeeds once it would leave a debt of at most
    // allowed_debt.
    Ok(Decision {
        ok: false,
        retry_after: Some(earliest(
            config,
            state,
            request.count,
            allowed_debt,
            now,
            Admission::Shown,
        )?),
        remaining: tokens,
        new_state: None,
    })
}

/// The debt a call may leave: none without `reserve`, else `max_reserved`
/// (unlimited when not set).
pub(crate) fn allowed_debt(config: &Config, reserve: bool) -> f64 {
    match (reserve, config.max_reserved) {
        (false, _) => 0.0,
        (true, Some(max_reserved)) => max_reserved,
        (true, None) => f64::INFINITY,
    }
}

/// The state of a limit without a row: full, at `now` (token bucket), at
/// the start of the current window (fixed window), or nothing admitted in
/// the current window nor the one before (sliding window).
pub(crate) fn initial_state(config: &Config, id: LimitId<'_>, now: Micros) -> State {
    match config.kind {
        Kind::TokenBucket => token_bucket::initial_state(config, now),
        Kind::FixedWindow => {
            fixed_window::initial_state(config, fixed_window::anchor(config, id), now)
        }
        Kind::SlidingWindow => {
            sliding_window::initial_state(config, fixed_window::anchor(config, id), now)
        }
        Kind::CalendarWindow => match config.calendar {
            Some(calendar) => calendar_window::initial_state(config.capacity(), calendar.0, now),
            None => token_bucket::initial_state(config, now),
        },
    }
}

/// The state brought to `now` (tokens granted; a sliding window's counts
/// moved to the window containing `now`).
pub(crate) fn refill(config: &Config, state: State, now: Micros) -> State {
    match config.kind {
        Kind::TokenBucket => token_bucket::refill(config, state, now),
        Kind::FixedWindow => fixed_window::refill(config, state, now),
        Kind::SlidingWindow => sliding_window::refill(config, state, now),
        Kind::CalendarWindow => match config.calendar {
            Some(calendar) => {
                calendar_window::refill(config.rate, config.capacity(), calendar.0, state, now)
            }
            None => state,
        },
    }
}

/// The tokens a call may take at `now` from the refilled state: its value
/// (token bucket, fixed window), or `rate - estimate` (sliding window).
pub(crate) fn tokens(config: &Config, refilled: State, now: Micros) -> f64 {
    match config.kind {
        Kind::TokenBucket | Kind::FixedWindow | Kind::CalendarWindow => refilled.value,
        Kind::SlidingWindow => sliding_window::tokens(config, refilled, now),
    }
}

/// The tokens of a stored state at `now`: what a call could take then
/// (a sliding window: `rate - estimate`), negative in debt.
pub fn tokens_at(config: &Config, stored: State, now: Micros) -> f64 {
    tokens(config, refill(config, stored, now), now)
}

/// The refilled state after `count` tokens are taken from it: the value
/// less `count`, or a sliding window's current count plus `count`.
pub(crate) fn take(config: &Config, refilled: State, count: f64) -> State {
    let value = match config.kind {
        Kind::TokenBucket | Kind::FixedWindow | Kind::CalendarWindow => refilled.value - count,
        Kind::SlidingWindow => refilled.value + count,
    };
    State { value, ..refilled }
}

/// The refilled state brought from `before` tokens to `after` (<= before):
/// the value `after` itself, or a sliding window's current count raised by
/// what was taken.
pub(crate) fn settle(config: &Config, refilled: State, before: f64, after: f64) -> State {
    match config.kind {
        Kind::TokenBucket | Kind::FixedWindow | Kind::CalendarWindow => State {
            value: after,
            ..refilled
        },
        Kind::SlidingWindow => take(config, refilled, (before - after).max(0.0)),
    }
}

/// Most adjustments of the formula's result by one step; float rounding
/// needs at most one or two.
const MAX_ADJUSTMENTS: usize = 4;

/// Which test a delay must pass in [`earliest`].
#[derive(Clone, Copy)]
pub(crate) enum Admission {
    /// The refilled value itself (what two shards, `status` and the
    /// bounds of a search compare).
    Exact,
    /// What a call of [`evaluate`] compares: the value or what is shown of
    /// it ([`available`]).
    Shown,
}

/// The smallest delay `t > 0` (in whole microseconds; for a fixed window,
/// the start of a window) after which a call for `count` tokens from state
/// `base` is admitted with a debt of at most `allowed_debt`, i.e.
/// `count - refill(base, now + t).value <= allowed_debt`, the exact test.
/// See [`earliest`].
pub(crate) fn retry_after(
    config: &Config,
    base: State,
    count: f64,
    allowed_debt: f64,
    now: Micros,
) -> Result<Micros, LimitError> {
    earliest(config, base, count, allowed_debt, now, Admission::Exact)
}

/// The smallest delay `t > 0` after which `count` from state `base` passes
/// `admission`'s test with a debt of at most `allowed_debt`: the very test
/// [`evaluate`] (for [`Admission::Shown`]) applies.
///
/// Starts from the formula (token bucket: `(ts - now) + tokens * period /
/// rate` rounded up; fixed window: `ts + period * ceil(tokens / rate) -
/// now`), then checks it with the arithmetic a later call will use: later
/// by a step (at most four) if float rounding made it early, then earlier
/// by as many steps as still pass (a galloping search: what is shown can
/// admit a call up to 5 * 10^-10 tokens early, which for a slow limit is
/// many microseconds), so that calling again exactly `retry_after` later
/// succeeds and one step earlier does not. The test is monotone: refills
/// only add tokens as time passes, and what is shown grows with the value.
pub(crate) fn earliest(
    config: &Config,
    base: State,
    count: f64,
    allowed_debt: f64,
    now: Micros,
    admission: Admission,
) -> Result<Micros, LimitError> {
    let refilled = refill(config, base, now);
    let admitted = |delay: Micros| {
        let at = now.saturating_add(delay);
        let value = tokens(config, refill(config, base, at), at);
        let value = match admission {
            Admission::Exact => value,
            Admission::Shown => available(value),
        };
        count - value <= allowed_debt
    };
    if let (Kind::CalendarWindow, Some(calendar)) = (config.kind, config.calendar) {
        // Windows are not a fixed step: search among window starts.
        let tokens = (count - allowed_debt) - refilled.value;
        return calendar_window::earliest(
            config.rate,
            config.period,
            calendar.0,
            refilled,
            tokens,
            now,
            admitted,
        );
    }
    let (estimate, step) = match config.kind {
        Kind::TokenBucket => {
            let tokens = (count - allowed_debt) - refilled.value;
            (token_bucket::wait(config, refilled, tokens, now).ceil(), 1)
        }
        Kind::FixedWindow => {
            let tokens = (count - allowed_debt) - refilled.value;
            (
                fixed_window::wait(config, refilled, tokens, now),
                config.period,
            )
        }
        Kind::SlidingWindow | Kind::CalendarWindow => (
            sliding_window::wait(config, refilled, count - allowed_debt, now),
            1,
        ),
    };
    // Keep clear of the end of the timestamp range: now + delay must not overflow.
    let limit = (i64::MAX / 4) as f64;
    if !(estimate.is_finite() && estimate < limit) {
        return Err(LimitError::out_of_range(
            "retry_after",
            format!("retry_after would be {estimate} microseconds, which is out of range"),
        ));
    }
    let mut delay = (estimate as Micros).max(1);
    for _ in 0..MAX_ADJUSTMENTS {
        if admitted(delay) {
            break;
        }
        delay = delay.saturating_add(step);
    }
    // Whether the delay `steps` steps earlier is still admitted.
    let earlier_admitted = |steps: Micros| {
        let earlier = delay.saturating_sub(steps.saturating_mul(step));
        earlier > 0 && admitted(earlier)
    };
    // Gallop back (1, 2, 4, ... steps) while admitted, then bisect between
    // the last admitted and the first refused.
    let (mut admitted_steps, mut refused_steps): (Micros, Micros) = (0, 1);
    while earlier_admitted(refused_steps) {
        admitted_steps = refused_steps;
        refused_steps = refused_steps.saturating_mul(2);
    }
    while refused_steps - admitted_steps > 1 {
        let middle = admitted_steps + (refused_steps - admitted_steps) / 2;
        if earlier_admitted(middle) {
            admitted_steps = middle;
        } else {
            refused_steps = middle;
        }
    }
    Ok(delay - admitted_steps * step)
}

#[cfg(test)]
mod tests;
