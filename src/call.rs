//! The checked arguments of the calls that consume or read a limit, as
//! every layer below the SQL functions takes them: [`Call`] (`rate_limit`,
//! `rate_check`, `rate_wait`), [`RequestArgument`] (one request of
//! `rate_limit_all`) and [`Answers`] (what `rate_limit_all` answers).

use crate::config::{inline_config, required};
use crate::definitions::{self, Definition};
use crate::errors::CallError;
use crate::storage::{LimitRows, RowId};
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::{Answer, Config, ErrorKind, LimitError, LimitId, Request};

/// The checked arguments of `rate_limit` / `rate_check`. Names and keys
/// are opaque bytes (see `names`).
pub struct Call<'a> {
    pub name: &'a [u8],
    pub key: Option<&'a [u8]>,
    pub request: Request,
    pub throws: bool,
    /// The inline config, if any.
    pub config: Option<Config>,
    /// The inline config as the SQL value and its type, kept on a
    /// distributed install only (the call may be passed on to the node
    /// holding its row): see [`config_argument`].
    pub config_argument: Option<(pg_sys::Datum, pg_sys::Oid)>,
    /// The SQL function this call is, when SQL called `rate_limit` or
    /// `rate_check` itself: on a distributed install a call that is its
    /// transaction's only work reaches another node in one round trip.
    pub function: Option<pg_sys::Oid>,
}

impl<'a> Call<'a> {
    /// Checks the arguments (22004 for a NULL name, count, reserve or
    /// throws; 22023 for an invalid inline config).
    pub fn new(
        name: Option<&'a [u8]>,
        key: Option<&'a [u8]>,
        count: Option<f64>,
        reserve: Option<bool>,
        throws: Option<bool>,
        config: Option<PgHeapTuple<'_, AllocatedByRust>>,
    ) -> Result<Self, LimitError> {
        let name = required(name, "name")?;
        let count = required(count, "count")?;
        let reserve = required(reserve, "reserve")?;
        let throws = required(throws, "throws")?;
        Ok(Call {
            name,
            key,
            request: Request { count, reserve },
            throws,
            config: inline_config(config)?,
            config_argument: None,
            function: None,
        })
    }

    /// The limit, as the math names it.
    pub fn id(&self) -> LimitId<'a> {
        LimitId {
            name: self.name,
            key: self.key,
        }
    }

    /// The row of an unsharded limit, under `definition` (its regime).
    pub fn row(&self, definition: &Definition) -> RowId<'a> {
        RowId {
            name: self.name,
            key: self.key,
            shard: 0,
            regime: definition.regime,
        }
    }

    /// The rows of a sharded limit under `definition` (its
    /// `config.shards` >= 2, which validation keeps within `i16`).
    pub fn shards(&self, definition: &Definition) -> LimitRows<'a> {
        LimitRows {
            name: self.name,
            key: self.key,
            shards: definition.config.shards as i16,
            regime: definition.regime,
        }
    }

    /// The inline config, else the key's override, else the definition,
    /// else 42704. (`evaluate` validates the count against it.)
    pub fn definition(&self) -> Result<Definition, CallError> {
        definitions::resolve(self.name, self.key, self.config)
    }

    /// The number of shards of a global limit with several, else `None`
    /// (on a distributed install such shards spread over the nodes).
    ///
    /// Errors: 42704 for an undefined limit.
    pub fn spread_shards(&self) -> Result<Option<i16>, CallError> {
        if self.key.is_some() {
            return Ok(None);
        }
        let shards = self.definition()?.config.shards;
        Ok((shards > 1).then_some(shards as i16))
    }
}

/// The inline config argument `number` of the call `fcinfo` as a datum and
/// its type, when the state table's rows are stored elsewhere (the
/// argument may travel to the node holding them) and it is not NULL.
///
/// # Safety
/// `fcinfo` must be a call with a `rate_limiter.config` argument `number`.
pub unsafe fn config_argument(
    fcinfo: pg_sys::FunctionCallInfo,
    number: usize,
) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
    let argument = *(*fcinfo).args.as_slice(number + 1).get(number)?;
    if argument.isnull || !crate::catalog::objects().elsewhere {
        return None;
    }
    let type_id = pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, number as i32);
    Some((argument.value, type_id))
}

/// One element of the `requests` array of `rate_limit_all`
/// (`rate_limiter.request`), checked ([`read_requests`]).
pub struct RequestArgument {
    pub name: Vec<u8>,
    pub key: Option<Vec<u8>>,
    /// NULL means 1.
    pub count: f64,
    /// The inline config, if any.
    pub inline: Option<Config>,
    /// The config in force: `inline`, else the key's override, else the
    /// definition.
    pub config: Config,
    /// Whether its limit enforces (`false`: shadow mode).
    pub enforce: bool,
    /// The regime of its rows (`Definition::regime`).
    pub regime: Option<i64>,
    /// The end of the key's block, when blocked (`Definition::blocked_until`).
    pub blocked_until: Option<rate_limiter_algorithm::Micros>,
    /// The element as it came (a `rate_limiter.request` datum, valid for
    /// the call), to pass on to another node on a distributed install.
    pub element: pg_sys::Datum,
}

/// What `rate_limit_all` answers: one [`Answer`] per request, in request
/// order, and for each request whether it was *contended* (its limit is
/// sharded and the call waited for another transaction to get one of its
/// shards).
pub type Answers = (Vec<Answer>, Vec<bool>);

/// A NULL where a value is required, naming the array element.
fn null_in(position: usize, field: &str) -> CallError {
    CallError::Limit(LimitError {
        kind: ErrorKind::NullValue,
        parameter: "requests",
        message: format!("requests[{position}]{field} must not be NULL"),
        hint: None,
    })
}

/// Reads the `rate_limiter.request[]` argument: (name, key, count, config)
/// per element, in order. Positions in messages are 1-based, as SQL
/// subscripts are (for an array with the default lower bound).
///
/// Errors: 22004 for a NULL element or name; 22023 for an invalid inline
/// config; then (once every element is checked) 42704 for a name without
/// config or definition.
pub fn read_requests(array: pg_sys::Datum) -> Result<Vec<RequestArgument>, CallError> {
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
            let definition = definitions::resolve(&name, key.as_deref(), inline)?;
            Ok(RequestArgument {
                name,
                key,
                count: count.unwrap_or(1.0),
                inline,
                config: definition.config,
                enforce: definition.enforce,
                regime: definition.regime,
                blocked_until: definition.blocked_until,
                element,
            })
        })
        .collect()
}
