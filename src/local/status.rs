//! Reading a limit's state on this node, taking no lock (`status`,
//! `http_headers`).

use crate::definitions::Definition;
use crate::storage::{self, LimitRows, Target};
use rate_limiter_algorithm::State;

/// The stored state of every shard of (name, key) under `definition`
/// (`stored[i]` is shard `i`; one entry for an unsharded limit), read with
/// the active snapshot, in the relation of `target`.
pub fn read_states(
    name: &[u8],
    key: Option<&[u8]>,
    definition: &Definition,
    target: Target,
) -> Vec<Option<State>> {
    let limit = LimitRows {
        name,
        key,
        shards: definition.config.shards.max(1) as i16,
        regime: definition.regime,
    };
    if limit.shards > 1 {
        storage::read_shards(limit, target)
    } else {
        vec![storage::read(limit.row(0), target)]
    }
}
