//! The distribution value `dkey` of a state row: the key, or `name/shard`
//! for a global limit; text, or bigint, integer or uuid when colocated with
//! a table distributed by a column of that type.

use super::error::Error;
use crate::errors::CallError;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// A value of the distribution column `dkey`, of the column's type
/// (ordered bytewise or numerically: the order `rate_limit_all` takes
/// the shard relations of one node in).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DistributionValue {
    /// `text COLLATE "C"`: the bytes.
    Text(Vec<u8>),
    /// `bigint`.
    BigInt(i64),
    /// `integer`.
    Integer(i32),
    /// `uuid`: its 16 bytes.
    Uuid([u8; 16]),
}

impl DistributionValue {
    pub(super) fn type_oid(&self) -> pg_sys::Oid {
        match self {
            DistributionValue::Text(_) => pg_sys::TEXTOID,
            DistributionValue::BigInt(_) => pg_sys::INT8OID,
            DistributionValue::Integer(_) => pg_sys::INT4OID,
            DistributionValue::Uuid(_) => pg_sys::UUIDOID,
        }
    }

    /// As a datum of [`Self::type_oid`] (a text or uuid one is allocated in
    /// the current memory context).
    pub(super) fn datum(&self) -> pg_sys::Datum {
        match self {
            DistributionValue::Text(bytes) => bytes
                .as_slice()
                .into_datum()
                .unwrap_or(pg_sys::Datum::from(0)),
            DistributionValue::BigInt(value) => pg_sys::Datum::from(*value),
            DistributionValue::Integer(value) => pg_sys::Datum::from(*value),
            DistributionValue::Uuid(bytes) => pgrx::datum::Uuid::from_bytes(*bytes)
                .into_datum()
                .unwrap_or(pg_sys::Datum::from(0)),
        }
    }

    /// As an argument of an SPI statement.
    pub(super) fn argument(&self) -> DatumWithOid<'_> {
        match self {
            // SAFETY: the bytes of a text value become a varlena of type text.
            DistributionValue::Text(bytes) => unsafe {
                DatumWithOid::new(bytes.as_slice(), pg_sys::TEXTOID)
            },
            DistributionValue::BigInt(value) => DatumWithOid::from(*value),
            DistributionValue::Integer(value) => DatumWithOid::from(*value),
            DistributionValue::Uuid(bytes) => {
                DatumWithOid::from(pgrx::datum::Uuid::from_bytes(*bytes))
            }
        }
    }
}

/// Whether `c` is white space to PostgreSQL's `int8in` (C's `isspace`).
pub(super) fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// `key` as a bigint distribution value: a decimal integer, with an
/// optional sign and white space around it (what `distribute()` checks
/// with `^[[:space:]]*[+-]?[0-9]+[[:space:]]*$` before `key::bigint`), in
/// range; `None` otherwise.
pub fn parse_bigint(key: &[u8]) -> Option<i64> {
    let start = key.iter().position(|&c| !is_space(c))?;
    let end = key.iter().rposition(|&c| !is_space(c))? + 1;
    let digits = &key[start..end];
    let unsigned = digits
        .strip_prefix(b"+")
        .or_else(|| digits.strip_prefix(b"-"))
        .unwrap_or(digits);
    if unsigned.is_empty() || !unsigned.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// `key` as a uuid distribution value, read as PostgreSQL's `uuid_in`
/// reads it (what `distribute()` checks before `key::uuid`): 32 hex
/// digits in either case, a hyphen allowed after any group of four but the
/// last, the whole optionally in braces, nothing else (no white space);
/// `None` otherwise.
pub fn parse_uuid(key: &[u8]) -> Option<[u8; 16]> {
    let digits = match key.strip_prefix(b"{") {
        Some(inner) => inner.strip_suffix(b"}")?,
        None => key,
    };
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut bytes = [0u8; 16];
    let mut at = 0;
    for (index, byte) in bytes.iter_mut().enumerate() {
        let high = hex(*digits.get(at)?)?;
        let low = hex(*digits.get(at + 1)?)?;
        *byte = high << 4 | low;
        at += 2;
        if index % 2 == 1 && index < 15 && digits.get(at) == Some(&b'-') {
            at += 1;
        }
    }
    (at == digits.len()).then_some(bytes)
}

/// `md5(value)::uuid`: the uuid distribution value of a global limit's
/// row, as `distribute()` computes it in SQL.
fn md5_uuid(value: &[u8]) -> [u8; 16] {
    // SAFETY: md5(text) of a text datum returns 32 lowercase hex digits.
    let hex = unsafe {
        let datum = value.into_datum().unwrap_or(pg_sys::Datum::from(0));
        let digest = pg_sys::OidFunctionCall1Coll(
            pg_sys::Oid::from(pg_sys::F_MD5_TEXT),
            pg_sys::C_COLLATION_OID,
            datum,
        );
        Vec::<u8>::from_datum(digest, false).unwrap_or_default()
    };
    parse_uuid(&hex).unwrap_or([0; 16])
}

/// `hashtext(value)`: the integer distribution value of a global limit's
/// row, as `distribute()` computes it in SQL.
pub(super) fn hash_text(value: &[u8]) -> i32 {
    // SAFETY: a text datum for hashtext(text), with a deterministic
    // collation (for which it hashes the bytes, as for the column's own).
    unsafe {
        let datum = value.into_datum().unwrap_or(pg_sys::Datum::from(0));
        pg_sys::OidFunctionCall1Coll(
            pg_sys::Oid::from(pg_sys::F_HASHTEXT),
            pg_sys::C_COLLATION_OID,
            datum,
        )
        .value() as i32
    }
}

/// `hashtextextended(value, 0)`: the bigint distribution value of a global
/// limit's row, as `distribute()` computes it in SQL.
pub(super) fn hash_text_extended(value: &[u8]) -> i64 {
    // SAFETY: a text datum and seed 0 for hashtextextended(text, bigint),
    // with a deterministic collation (for which it hashes the bytes, as
    // for the column's own).
    unsafe {
        let datum = value.into_datum().unwrap_or(pg_sys::Datum::from(0));
        pg_sys::OidFunctionCall2Coll(
            pg_sys::Oid::from(pg_sys::F_HASHTEXTEXTENDED),
            pg_sys::C_COLLATION_OID,
            datum,
            pg_sys::Datum::from(0i64),
        )
        .value() as i64
    }
}

/// The value of a distribution column `dkey` of type `column_type` of the
/// row (name, key, shard): the key, or `name/shard` for a global limit (so the shards of a
/// global limit spread over the nodes). For a bigint column, the key read
/// as a decimal integer (a tenant id: 22P02 otherwise), or
/// `hashtextextended(name/shard, 0)`; for an integer column, the same in
/// the range of integer, or `hashtext(name/shard)`; for a uuid column, the
/// key read as a uuid (22P02 otherwise), or `md5(name/shard)::uuid`.
pub fn value_for(
    column_type: pg_sys::Oid,
    name: &[u8],
    key: Option<&[u8]>,
    shard: i16,
) -> Result<DistributionValue, CallError> {
    let text = match key {
        Some(key) => key.to_vec(),
        None => {
            let mut value = name.to_vec();
            value.extend_from_slice(format!("/{shard}").as_bytes());
            value
        }
    };
    if column_type == pg_sys::UUIDOID {
        return match key {
            Some(key) => parse_uuid(key)
                .map(DistributionValue::Uuid)
                .ok_or_else(|| CallError::from(Error::KeyNotUuid(key.to_vec()))),
            None => Ok(DistributionValue::Uuid(md5_uuid(&text))),
        };
    }
    if column_type == pg_sys::INT4OID {
        return match key {
            Some(key) => parse_bigint(key)
                .and_then(|value| i32::try_from(value).ok())
                .map(DistributionValue::Integer)
                .ok_or_else(|| CallError::from(Error::KeyNotInteger(key.to_vec()))),
            None => Ok(DistributionValue::Integer(hash_text(&text))),
        };
    }
    if column_type != pg_sys::INT8OID {
        return Ok(DistributionValue::Text(text));
    }
    match key {
        Some(key) => parse_bigint(key)
            .map(DistributionValue::BigInt)
            .ok_or_else(|| CallError::from(Error::KeyNotBigInt(key.to_vec()))),
        None => Ok(DistributionValue::BigInt(hash_text_extended(&text))),
    }
}
