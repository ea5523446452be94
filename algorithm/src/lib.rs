//! The rate-limit math of the `rate_limiter` PostgreSQL extension, with no
//! PostgreSQL dependency so it can be unit- and property-tested on its own.
//!
//! One call is a pure function: [`evaluate`] takes the stored [`State`] of a
//! limit (or `None` when no row exists yet), its [`Config`], the current time
//! and the [`Request`], and returns a [`Decision`]: whether the request is
//! admitted, when a refused (or reserved) request may run, how many tokens
//! remain, and the state to store (`None` means "write nothing").
//!
//! Units used throughout:
//! - times are [`Micros`]: microseconds since 2000-01-01 00:00 UTC, the
//!   PostgreSQL epoch (what a `timestamptz` holds);
//! - durations (`period`, `retry_after`) are microseconds;
//! - `rate`, `capacity`, `max_reserved`, `count` and `value` are tokens
//!   (`f64`, may be fractional).

mod all_or_nothing;
mod block;
mod block_policy;
pub mod calendar_unit;
pub mod calendar_window;
pub mod civil;
pub mod composite;
mod config;
mod credit;
mod decision;
mod error;
pub mod eviction;
pub mod fixed_window;
mod prune;
pub mod shards;
mod shown;
pub mod sliding_window;
mod state;
mod status;
mod time;
pub mod token_bucket;
pub mod verdict;

pub use all_or_nothing::{evaluate_all_or_nothing, Answer, Limit, Member, Outcome};
pub use block::blocked;
pub use block_policy::{uses_up, BlockPolicy, Strikes};
pub use config::{Config, Kind, MAX_SHARDS};
pub use credit::{credit, validate_credit};
pub use decision::{evaluate, tokens_at, Decision};
pub use error::{ErrorKind, LimitError};
pub use prune::prunable;
pub use shards::{
    evaluate_all, evaluate_fullest, evaluate_looked_at, evaluate_pair, evaluate_single,
    shard_order, Candidate, ShardedDecision,
};
pub use shown::{available, shown};
pub use state::{LimitId, Request, State};
pub use status::{status, Status};
pub use time::{duration_micros, period_micros, Micros, MICROS_PER_MILLISECOND};
pub use verdict::{near_limit, Verdict};
