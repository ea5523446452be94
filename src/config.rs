//! The SQL type `rate_limiter.config`: reading it, building it, and the
//! constructors `rate_limiter.token_bucket()`, `rate_limiter.fixed_window()`,
//! `rate_limiter.sliding_window()`, `rate_limiter.calendar_window()`
//! and `rate_limiter.with_block()`.
//!
//! A config is validated wherever it is used (constructors, `define`,
//! inline in `rate_limit`/`rate_check`), always through
//! [`ConfigValues::to_config`], so a hand-built `ROW(...)::rate_limiter.config`
//! gets the same errors as the constructors.

use crate::errors::CallError;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::prelude::*;
use pgrx::AllocatedByRust;
use rate_limiter_algorithm::{
    duration_micros, period_micros, BlockPolicy, Config, Kind, LimitError,
};
use std::num::NonZeroUsize;

/// The SQL composite `rate_limiter.config` as a result.
pub type ConfigTuple = PgHeapTuple<'static, AllocatedByRust>;

/// The SQL name of the composite type.
const CONFIG_TYPE: &str = "rate_limiter.config";
/// The SQL name of the enum type of its first attribute.
const KIND_TYPE: &str = "rate_limiter.kind";

/// The fields of a `rate_limiter.config` as SQL values (the period kept as
/// the caller wrote it), with the required ones known not to be NULL.
#[derive(Debug, Clone, Copy)]
pub struct ConfigValues {
    pub kind: Kind,
    pub rate: f64,
    pub period: Interval,
    pub capacity: Option<f64>,
    pub max_reserved: Option<f64>,
    pub shards: i32,
    pub start: Option<TimestampWithTimeZone>,
    /// Automatic blocks (`with_block`, docs/blocks.md): all `None` for a
    /// limit without. `forget_after` `None` with a `block_for` is 1 day.
    pub block_for: Option<Interval>,
    pub max_block: Option<Interval>,
    pub forget_after: Option<Interval>,
    /// A calendar window's time zone (docs/shapes.md), checked
    /// ([`crate::calendar::zone`]); `None` for the other kinds.
    pub time_zone: Option<&'static str>,
}

/// The attributes of `rate_limiter.config` (0.6.0 and later; before, the
/// first 7).
const CONFIG_ATTRIBUTES: u16 = 11;

/// `forget_after` when not given: a day.
const DEFAULT_FORGET_AFTER: i64 = 86_400_000_000;

/// An interval as a duration of microseconds for `parameter`.
fn micros_of(interval: Interval, parameter: &'static str) -> Result<i64, LimitError> {
    duration_micros(
        interval.months(),
        interval.days(),
        interval.micros(),
        parameter,
    )
}

/// A required argument or field: `None` (SQL NULL) is a `22004` error
/// naming it.
pub fn required<T>(value: Option<T>, parameter: &'static str) -> Result<T, LimitError> {
    value.ok_or_else(|| LimitError::null(parameter))
}

fn malformed(error: &dyn std::fmt::Display) -> LimitError {
    LimitError::invalid(
        "config",
        format!("config is not a valid rate_limiter.config: {error}"),
    )
}

/// The tuple of a `rate_limiter.config` argument, for [`kind_label`] and
/// [`ConfigValues::from_header`] (a composite datum's header).
pub fn header_of(config: PgHeapTuple<'_, AllocatedByRust>) -> pg_sys::HeapTupleHeader {
    // SAFETY: the tuple pgrx made of the argument; its header stays
    // allocated for the call.
    unsafe { (*config.into_pg()).t_data }
}

/// The label of a `rate_limiter.config` value's kind (`None` when NULL):
/// `define` sends `'concurrency'` to `rate_limiter._define_concurrency`
/// (sql/concurrency.sql).
pub fn kind_label(header: pg_sys::HeapTupleHeader) -> Option<String> {
    // SAFETY: as in `ConfigValues::from_header`: attribute 1 is the kind,
    // an enum value, whose datum is its pg_enum row's OID.
    unsafe {
        let mut is_null = false;
        let kind = pg_sys::GetAttributeByNum(header, 1, &mut is_null);
        if is_null {
            return None;
        }
        let (label, _, _) =
            pgrx::enum_helper::lookup_enum_by_oid(pg_sys::Oid::from(kind.value() as u32));
        Some(label)
    }
}

/// A `rate_limiter.config` argument (the tuple [`header_of`] gave, or
/// NULL) passed on to an SPI statement, typed as the config type.
pub fn argument(config: Option<pg_sys::HeapTupleHeader>) -> pgrx::datum::DatumWithOid<'static> {
    match config {
        // SAFETY: a composite datum is the pointer to its tuple header,
        // whose type is the one its header names.
        Some(header) => unsafe {
            let type_id = pg_sys::Oid::from((*header).t_choice.t_datum.datum_typeid);
            pgrx::datum::DatumWithOid::new(pg_sys::Datum::from(header), type_id)
        },
        None => pgrx::datum::DatumWithOid::null_oid(crate::catalog::objects().config_type),
    }
}

/// The message of [`unknown_kind`] for a concurrency limit.
const CONCURRENCY_KIND: &str = "this is a concurrency limit, not a rate limit";

/// The error of a concurrency limit's kind where a rate limit's is read
/// (docs/concurrency.md: a concurrency limit takes no tokens), else of a
/// kind this library does not know.
pub fn unknown_kind(label: &str) -> LimitError {
    if label == "concurrency" {
        return LimitError {
            hint: Some("Take a slot with rate_limiter.acquire(): a concurrency limit counts operations in flight, not tokens."),
            ..LimitError::invalid("kind", CONCURRENCY_KIND.to_string())
        };
    }
    LimitError::invalid("kind", format!("unknown kind {label}"))
}

impl ConfigValues {
    /// Reads a `rate_limiter.config` value. (pgrx cannot read an enum
    /// attribute through `PgHeapTuple`, so this reads the tuple with
    /// PostgreSQL's `GetAttributeByNum`.) NULL
    /// `kind`, `rate`, `period` or `shards` are `22004` errors naming the
    /// field.
    pub fn from_tuple(config: PgHeapTuple<'_, AllocatedByRust>) -> Result<Self, LimitError> {
        Self::from_header(header_of(config))
    }

    /// [`ConfigValues::from_tuple`] of the tuple [`header_of`] gave.
    pub fn from_header(header: pg_sys::HeapTupleHeader) -> Result<Self, LimitError> {
        // SAFETY: PostgreSQL passes a value of type rate_limiter.config for
        // this argument (sql/functions.sql), whose attributes are, in order,
        // kind, rate, period, capacity, max_reserved, shards, start.
        unsafe {
            let attribute = |number: i16| {
                let mut is_null = false;
                let datum = pg_sys::GetAttributeByNum(header, number, &mut is_null);
                (datum, is_null)
            };
            let (kind, is_null) = attribute(1);
            if is_null {
                return Err(LimitError::null("kind"));
            }
            // An enum value is the OID of its pg_enum row.
            let (label, _, _) =
                pgrx::enum_helper::lookup_enum_by_oid(pg_sys::Oid::from(kind.value() as u32));
            let kind = Kind::from_label(&label).ok_or_else(|| unknown_kind(&label))?;
            let (rate, is_null) = attribute(2);
            let (period, period_is_null) = attribute(3);
            let (capacity, capacity_is_null) = attribute(4);
            let (max_reserved, max_reserved_is_null) = attribute(5);
            let (shards, shards_is_null) = attribute(6);
            let (start, start_is_null) = attribute(7);
            // A value of the type before 0.6.0 has 7 attributes (the
            // tuple says how many it has: attributes past them must not be
            // asked for).
            let natts = (*header).t_infomask2 & pg_sys::HEAP_NATTS_MASK as u16;
            let interval = |number: i16| {
                if natts < CONFIG_ATTRIBUTES {
                    return None;
                }
                let (datum, is_null) = attribute(number);
                Interval::from_datum(datum, is_null)
            };
            Ok(ConfigValues {
                kind,
                rate: required(f64::from_datum(rate, is_null), "rate")?,
                period: required(Interval::from_datum(period, period_is_null), "period")?,
                capacity: f64::from_datum(capacity, capacity_is_null),
                max_reserved: f64::from_datum(max_reserved, max_reserved_is_null),
                shards: required(i32::from_datum(shards, shards_is_null), "shards")?,
                start: TimestampWithTimeZone::from_datum(start, start_is_null),
                block_for: interval(8),
                max_block: interval(9),
                forget_after: interval(10),
                time_zone: if natts < CONFIG_ATTRIBUTES {
                    None
                } else {
                    let (datum, is_null) = attribute(11);
                    String::from_datum(datum, is_null)
                        .map(|zone| crate::calendar::zone(&zone))
                        .transpose()?
                },
            })
        }
    }

    /// The automatic blocks these values ask for, validated by the
    /// caller (`Config::validate`).
    ///
    /// Errors: `22023` for a duration that is negative or too long, or a
    /// `max_block` or `forget_after` without a `block_for`.
    fn block(&self) -> Result<Option<BlockPolicy>, LimitError> {
        let Some(block_for) = self.block_for else {
            if self.max_block.is_some() || self.forget_after.is_some() {
                return Err(LimitError::invalid(
                    "block_for",
                    "max_block and forget_after need a block_for".to_string(),
                ));
            }
            return Ok(None);
        };
        Ok(Some(BlockPolicy {
            block_for: micros_of(block_for, "block_for")?,
            max_block: self
                .max_block
                .map(|max_block| micros_of(max_block, "max_block"))
                .transpose()?,
            forget_after: self
                .forget_after
                .map_or(Ok(DEFAULT_FORGET_AFTER), |forget_after| {
                    micros_of(forget_after, "forget_after")
                })?,
        }))
    }

    /// The validated configuration for the math.
    ///
    /// Errors: `22023` naming the offending field (`shards` must be in
    /// `1..=32767`).
    pub fn to_config(&self) -> Result<Config, LimitError> {
        if self.start.is_some_and(|start| !start.is_finite()) {
            return Err(LimitError::invalid(
                "start",
                "start must be a finite timestamp".to_string(),
            ));
        }
        let period = period_micros(
            self.period.months(),
            self.period.days(),
            self.period.micros(),
        )?;
        let config = Config {
            kind: self.kind,
            rate: self.rate,
            period,
            capacity: self.capacity,
            max_reserved: self.max_reserved,
            shards: self.shards,
            start: self.start.map(|start| start.into_inner()),
            block: self.block()?,
            calendar: match (self.kind, self.time_zone) {
                (Kind::CalendarWindow, Some(zone)) => Some(crate::calendar::calendar(
                    rate_limiter_algorithm::calendar_unit::Unit::from_period(period)?,
                    zone,
                )),
                _ => None,
            },
        };
        if self.kind != Kind::CalendarWindow && self.time_zone.is_some() {
            return Err(LimitError::invalid(
                "time_zone",
                "time_zone applies only to calendar windows".to_string(),
            ));
        }
        config.validate()?;
        Ok(config)
    }

    /// Builds the SQL composite.
    pub fn into_tuple(self) -> Result<ConfigTuple, CallError> {
        let error = |e: &dyn std::fmt::Display| CallError::Limit(malformed(e));
        let mut tuple = PgHeapTuple::new_composite_type(CONFIG_TYPE).map_err(|e| error(&e))?;
        let kind = pgrx::enum_helper::lookup_enum_by_label(KIND_TYPE, self.kind.label());
        // SAFETY: attribute 1 is of type rate_limiter.kind and `kind` is one of its values.
        unsafe { tuple.set_by_index_unchecked(NonZeroUsize::MIN, Some(kind)) };
        tuple
            .set_by_name("rate", self.rate)
            .map_err(|e| error(&e))?;
        tuple
            .set_by_name("period", self.period)
            .map_err(|e| error(&e))?;
        tuple
            .set_by_name("capacity", self.capacity)
            .map_err(|e| error(&e))?;
        tuple
            .set_by_name("max_reserved", self.max_reserved)
            .map_err(|e| error(&e))?;
        tuple
            .set_by_name("shards", self.shards)
            .map_err(|e| error(&e))?;
        tuple
            .set_by_name("start", self.start)
            .map_err(|e| error(&e))?;
        // (Only when set: the type of a version before 0.6.0 lacks them.)
        for (attribute, value) in [
            ("block_for", self.block_for),
            ("max_block", self.max_block),
            ("forget_after", self.forget_after),
        ] {
            if value.is_some() {
                tuple.set_by_name(attribute, value).map_err(|e| error(&e))?;
            }
        }
        if self.time_zone.is_some() {
            tuple
                .set_by_name("time_zone", self.time_zone)
                .map_err(|e| error(&e))?;
        }
        Ok(tuple)
    }
}

/// Reads and validates an optional inline config argument.
pub fn inline_config(
    config: Option<PgHeapTuple<'_, AllocatedByRust>>,
) -> Result<Option<Config>, LimitError> {
    inline_config_of(config.map(header_of))
}

/// [`inline_config`] of the tuple [`header_of`] gave.
pub fn inline_config_of(
    config: Option<pg_sys::HeapTupleHeader>,
) -> Result<Option<Config>, LimitError> {
    match config {
        None => Ok(None),
        Some(header) => ConfigValues::from_header(header)?.to_config().map(Some),
    }
}

/// Whether `error` is [`unknown_kind`]'s of a concurrency limit: a
/// function that answers for both kinds (`status`) then asks
/// sql/concurrency.sql.
pub fn is_concurrency_kind(error: &LimitError) -> bool {
    error.parameter == "kind" && error.message == CONCURRENCY_KIND
}

/// The SQL value of checked `values`, or their error raised (a
/// constructor's result).
fn built(values: Result<ConfigValues, LimitError>) -> ConfigTuple {
    match values
        .map_err(CallError::Limit)
        .and_then(ConfigValues::into_tuple)
    {
        Ok(tuple) => tuple,
        Err(error) => crate::errors::report(error),
    }
}

#[allow(clippy::too_many_arguments)]
fn construct(
    kind: Kind,
    rate: Option<f64>,
    period: Option<Interval>,
    capacity: Option<f64>,
    max_reserved: Option<f64>,
    shards: Option<i32>,
    start: Option<TimestampWithTimeZone>,
) -> ConfigTuple {
    let values = (|| {
        let values = ConfigValues {
            kind,
            rate: required(rate, "rate")?,
            period: required(period, "period")?,
            capacity,
            max_reserved,
            shards: required(shards, "shards")?,
            start,
            block_for: None,
            max_block: None,
            forget_after: None,
            time_zone: None,
        };
        values.to_config()?;
        Ok(values)
    })();
    built(values)
}

/// `rate_limiter.token_bucket(rate, period, capacity, max_reserved, shards)`:
/// a validated token-bucket config. See sql/functions.sql.
#[pg_extern(sql = false)]
fn token_bucket(
    rate: Option<f64>,
    period: Option<Interval>,
    capacity: Option<f64>,
    max_reserved: Option<f64>,
    shards: Option<i32>,
) -> pgrx::composite_type!('static, "rate_limiter.config") {
    construct(
        Kind::TokenBucket,
        rate,
        period,
        capacity,
        max_reserved,
        shards,
        None,
    )
}

/// `rate_limiter.fixed_window(rate, period, capacity, max_reserved, shards, start)`:
/// a validated fixed-window config. See sql/functions.sql.
#[pg_extern(sql = false)]
fn fixed_window(
    rate: Option<f64>,
    period: Option<Interval>,
    capacity: Option<f64>,
    max_reserved: Option<f64>,
    shards: Option<i32>,
    start: Option<TimestampWithTimeZone>,
) -> pgrx::composite_type!('static, "rate_limiter.config") {
    construct(
        Kind::FixedWindow,
        rate,
        period,
        capacity,
        max_reserved,
        shards,
        start,
    )
}

/// `rate_limiter.sliding_window(rate, period, max_reserved, shards, start)`:
/// a validated sliding-window config (capacity NULL: a sliding window's
/// capacity is its rate). See sql/functions.sql and docs/shapes.md.
#[pg_extern(sql = false)]
fn sliding_window(
    rate: Option<f64>,
    period: Option<Interval>,
    max_reserved: Option<f64>,
    shards: Option<i32>,
    start: Option<TimestampWithTimeZone>,
) -> pgrx::composite_type!('static, "rate_limiter.config") {
    construct(
        Kind::SlidingWindow,
        rate,
        period,
        None,
        max_reserved,
        shards,
        start,
    )
}

/// `rate_limiter.calendar_window(rate, unit, time_zone, capacity, max_reserved)`:
/// a validated calendar-window config: `rate` tokens at the start of each
/// calendar `unit` in `time_zone` (its period is the unit, its time_zone
/// the zone). See sql/functions.sql and docs/shapes.md.
///
/// Errors: 22004 (NULL rate, unit or time_zone); 22023 (an unknown unit
/// or time zone, naming it; what the other constructors check).
#[pg_extern(sql = false)]
fn calendar_window(
    rate: Option<f64>,
    unit: Option<&str>,
    time_zone: Option<&str>,
    capacity: Option<f64>,
    max_reserved: Option<f64>,
) -> pgrx::composite_type!('static, "rate_limiter.config") {
    let values = (|| {
        let rate = required(rate, "rate")?;
        let unit = rate_limiter_algorithm::calendar_unit::Unit::from_name(required(unit, "unit")?)?;
        let time_zone = crate::calendar::zone(required(time_zone, "time_zone")?)?;
        let values = ConfigValues {
            kind: Kind::CalendarWindow,
            rate,
            period: crate::calendar::period(unit),
            capacity,
            max_reserved,
            shards: 1,
            start: None,
            block_for: None,
            max_block: None,
            forget_after: None,
            time_zone: Some(time_zone),
        };
        values.to_config()?;
        Ok(values)
    })();
    built(values)
}

/// `rate_limiter.with_block(config, block_for, max_block, forget_after)`:
/// `config` with automatic blocks (docs/blocks.md). See sql/functions.sql.
///
/// Errors: 22004 (NULL config, block_for or forget_after); 22023 (an
/// invalid config, a block_for not greater than zero, a max_block below
/// block_for, a negative forget_after, a duration too long).
#[pg_extern(sql = false)]
fn with_block(
    config: Option<pgrx::composite_type!("rate_limiter.config")>,
    block_for: Option<Interval>,
    max_block: Option<Interval>,
    forget_after: Option<Interval>,
) -> pgrx::composite_type!('static, "rate_limiter.config") {
    let values = (|| {
        let base = ConfigValues::from_tuple(required(config, "config")?)?;
        let values = ConfigValues {
            block_for: Some(required(block_for, "block_for")?),
            max_block,
            forget_after: Some(required(forget_after, "forget_after")?),
            ..base
        };
        values.to_config()?;
        Ok(values)
    })();
    built(values)
}
