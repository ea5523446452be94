//! What a call is about and what is stored: the [`State`] of one limit
//! row, the [`LimitId`] of the limit and the [`Request`]. Every module of
//! the math uses them; they depend on nothing but [`Micros`].

use crate::time::Micros;

/// The numbers stored per limit (one row of `rate_limiter.rate_limits`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct State {
    /// Token bucket, fixed window: tokens available at `ts`; negative
    /// while a reservation is owed. Sliding window: tokens admitted in the
    /// window that starts at `ts`.
    pub value: f64,
    /// Token bucket: when `value` was computed. Fixed and sliding window:
    /// the start of the window `value` belongs to. Microseconds since
    /// 2000-01-01 UTC.
    pub ts: Micros,
    /// Sliding window: tokens admitted in the window before `ts`'s (the
    /// column `prev`, NULL when 0). Always 0 for the other kinds.
    pub previous: f64,
}

/// Which limit a call is about: used only to derive a fixed window's phase.
/// Names and keys are opaque bytes (in the database's encoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitId<'a> {
    /// The limit's name.
    pub name: &'a [u8],
    /// The key; `None` is the global limit of that name.
    pub key: Option<&'a [u8]>,
}

/// What a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Tokens to consume; finite and >= 0.
    pub count: f64,
    /// Whether the call may go into debt (a reservation) when tokens are short.
    pub reserve: bool,
}
