//! Citus as the cluster of `crate::placement`: each call on a distributed
//! install finds the node holding its rows, and runs the single-server
//! path (`crate::local`) there with storage routed to the shard relation
//! ([`here`]), or passes the call on to that node ([`elsewhere`] and the
//! other `_at` calls); a global limit with several shards spreads over
//! the nodes ([`consume_spread`]).

use super::all_or_nothing;
use super::blocks;
use super::consume::{alone, consume_elsewhere, consume_spread, elsewhere};
use super::credit::credit;
use super::define::define_distributed;
use super::metadata::distribution_value;
use super::prune::prune_everywhere;
use super::read::read_states;
use super::shard_query::before_call;
use super::shard_query::usable;
use super::site::here;
use crate::call::{Answers, Call, RequestArgument};
use crate::config::ConfigValues;
use crate::errors::CallError;
use crate::local;
use crate::placement::Cluster;
use crate::stats::Counted;
use crate::storage::ShardPlaces;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use rate_limiter_algorithm::{Config, Decision, State};

/// The cluster `crate::citus::register` installs.
pub(super) struct Citus;

impl Cluster for Citus {
    fn before_call(&self, function: &'static str) -> Result<(), CallError> {
        before_call(function)
    }

    fn usable(&self) -> Result<(), CallError> {
        usable()
    }

    fn before_override(&self) -> Result<(), CallError> {
        usable()?;
        super::metadata::overrides_distributed()
    }

    fn before_block(&self, global: Option<&[u8]>) -> Result<(), CallError> {
        blocks::before_block(global)
    }

    fn blocks_extra(
        &self,
        name: &[u8],
        key: Option<&[u8]>,
    ) -> Result<(pg_sys::Datum, pg_sys::Oid), CallError> {
        blocks::blocks_extra(name, key)
    }

    fn consume(&self, call: &Call<'_>) -> Result<(Decision, Counted), CallError> {
        let automatic = call.definition()?.config.block.is_some();
        if automatic && !blocks::holds_blocks() {
            return Err(blocks::not_distributed());
        }
        if let Some(shards) = call.spread_shards()? {
            if automatic {
                return Err(blocks::spread_blocks());
            }
            return consume_spread(call, shards);
        }
        let dkey = distribution_value(call.name, call.key, 0)?;
        match here(&dkey, true, |target| {
            local::consume::consume(call, ShardPlaces::In(target))
        })? {
            Some(answer) => Ok(answer),
            None => consume_elsewhere(call, &dkey, alone(call)),
        }
    }

    fn check(&self, call: &Call<'_>) -> Result<Decision, CallError> {
        if let Some(shards) = call.spread_shards()? {
            // Its shards spread over the nodes: read them where they live.
            let definition = call.definition()?;
            let stored = read_states(call.name, None, shards)?;
            return local::consume::check_shards(call, &definition, &stored);
        }
        let dkey = distribution_value(call.name, call.key, 0)?;
        match here(&dkey, false, |target| local::consume::check(call, target))? {
            Some(answer) => Ok(answer),
            None => elsewhere(call, &dkey, false, alone(call)).map(|(decision, _)| decision),
        }
    }

    fn credit(
        &self,
        name: &[u8],
        key: Option<&[u8]>,
        count: f64,
        inline: Option<Config>,
        config_argument: Option<pg_sys::Datum>,
    ) -> Result<f64, CallError> {
        credit(name, key, count, inline, config_argument)
    }

    fn read_states(
        &self,
        name: &[u8],
        key: Option<&[u8]>,
        config: &Config,
    ) -> Result<Vec<Option<State>>, CallError> {
        // A global limit with several shards is read on every node
        // holding some.
        read_states(name, key, config.shards.max(1) as i16)
    }

    fn consume_all(
        &self,
        requests: &[&RequestArgument],
        reserve: bool,
    ) -> Result<Answers, CallError> {
        for request in requests
            .iter()
            .filter(|request| request.config.block.is_some())
        {
            if request.key.is_none() && request.config.shards > 1 {
                return Err(blocks::spread_blocks());
            }
            if !blocks::holds_blocks() {
                return Err(blocks::not_distributed());
            }
        }
        all_or_nothing::consume(requests, reserve)
    }

    fn prune(&self, older_than: Option<Interval>) -> Result<i64, CallError> {
        prune_everywhere(older_than)
    }

    fn define(
        &self,
        client: &mut SpiClient<'_>,
        name: &[u8],
        values: &ConfigValues,
        enforce: bool,
    ) -> Result<(), CallError> {
        define_distributed(client, name, values, enforce)
    }
}
