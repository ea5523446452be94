//! The SQL functions a caller runs, one file each (declared in
//! `sql/functions.sql`): they check and gather the arguments, ask
//! `crate::placement` where the rows live, and return the result rows.
//! Nothing below this folder calls up into it.
//!
//! - [`rate_limit`]: `rate_limit`, `rate_check`, `rate_reset`;
//! - [`rate_limit_all`]: several limits at once, all or nothing;
//! - [`composite`]: the calls of a name made with `define_all`;
//! - [`rate_credit`]: giving tokens back;
//! - [`rate_wait`]: sleeping until the limit admits;
//! - [`define`]: `define` and `undefine`;
//! - [`overrides`]: `override` and `remove_override`, a key's own
//!   configuration;
//! - [`blocks`]: `block`, `unblock` and `blocked`, a key refused for a
//!   while;
//! - [`prune`]: deleting the state rows that change no later answer;
//! - [`status`]: where a limit stands without consuming;
//! - [`http_headers`]: the IETF RateLimit fields;
//! - [`acquire`]: a concurrency limit's slot, its common case;
//! - [`concurrency`]: the native helpers of `acquire`, `release` and `renew`.

pub mod acquire;
pub mod blocks;
pub mod composite;
pub mod concurrency;
pub mod define;
pub mod http_headers;
pub mod overrides;
pub mod prune;
pub mod rate_credit;
pub mod rate_limit;
pub mod rate_limit_all;
pub mod rate_wait;
pub mod status;
