//! Reading a limit's state on this node, taking no lock (`status`,
//! `http_headers`).

use crate::storage::{self, RowId, Target};
use rate_limiter_algorithm::{Config, State};

/// The stored state of every shard of (name, key) under `config`
/// (`stored[i]` is shard `i`; one entry for an unsharded limit), read with
/// the active snapshot, in the relation of `target`.
pub fn read_states(
    name: &[u8],
    key: Option<&[u8]>,
    config: &Config,
    target: Target,
) -> Vec<Option<State>> {
    if config.shards > 1 {
        storage::read_shards(name, key, config.shards as i16, target)
    } else {
        vec![storage::read(
            RowId {
                name,
                key,
                shard: 0,
            },
            target,
        )]
    }
}
