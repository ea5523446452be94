//! Names and keys: opaque byte strings in the database's encoding.
//!
//! A limit's name and key are `text` arguments, but the extension never
//! interprets them: every byte sequence the database's encoding accepts
//! (UTF8, LATIN1, SQL_ASCII, ...) is a name or key, and distinct byte
//! sequences are distinct limits. So they are read as bytes (never as Rust
//! `&str`, which would demand UTF-8), stored as the same bytes, and only
//! turned into characters for humans:
//!
//! - [`for_message`]: in an error message. In a UTF8 database the text as
//!   it is; in any other, ASCII with every other byte written `\xNN` (a
//!   message is in the server's encoding, and escaped ASCII is valid in
//!   all of them).
//! - [`for_json`]: in the JSON DETAIL of a refusal, as Unicode: converted
//!   from the database encoding (in SQL_ASCII, where bytes above 127 have
//!   no defined meaning, byte `b` becomes U+00`b`).
//! - [`for_view`]: in a view's `text` column (`rate_limiter.stats`), as a
//!   value that always converts to UTF-8 (what monitoring clients such as
//!   postgres_exporter read) and that no other name shows as (server
//!   encodings keep ASCII bytes for ASCII characters, so the escapes below
//!   cannot split a character): in a UTF8 database the bytes as they are; in any other,
//!   every character that has a UTF-8 equivalent as it is, every other
//!   byte written `\xNN`, and `\` written `\\` (so an escape never
//!   reads like a name that contains one).

use pgrx::pg_sys;
use pgrx::prelude::*;

/// Whether the current database's encoding is UTF8.
fn database_is_utf8() -> bool {
    // SAFETY: reads a backend-local setting.
    unsafe { pg_sys::GetDatabaseEncoding() == pg_sys::pg_enc::PG_UTF8 as i32 }
}

/// Messages show at most this many characters of a name or key.
const MESSAGE_LIMIT: usize = 64;

/// `text` for an error message (see the module documentation), cut to
/// [`MESSAGE_LIMIT`] characters with "..." when longer.
pub fn for_message(text: &[u8]) -> String {
    let mut shown = String::new();
    let mut characters = 0;
    let mut push = |piece: &str, shown: &mut String| {
        characters += 1;
        if characters <= MESSAGE_LIMIT {
            shown.push_str(piece);
        }
    };
    match std::str::from_utf8(text) {
        Ok(valid) if database_is_utf8() => {
            for character in valid.chars() {
                push(character.encode_utf8(&mut [0; 4]), &mut shown);
            }
        }
        _ => {
            for &byte in text {
                if byte.is_ascii() && !byte.is_ascii_control() {
                    push((byte as char).encode_utf8(&mut [0; 4]), &mut shown);
                } else {
                    push(&format!("\\x{byte:02x}"), &mut shown);
                }
            }
        }
    }
    if characters > MESSAGE_LIMIT {
        shown.push_str("...");
    }
    shown
}

/// `text` as Unicode, for JSON (see the module documentation).
pub fn for_json(text: &[u8]) -> String {
    if let Ok(valid) = std::str::from_utf8(text) {
        if database_is_utf8() || valid.is_ascii() {
            return valid.to_string();
        }
    }
    // SAFETY: reads a backend-local setting.
    let encoding = unsafe { pg_sys::GetDatabaseEncoding() };
    if encoding != pg_sys::pg_enc::PG_SQL_ASCII as i32 {
        let converted = PgTryBuilder::new(|| unsafe {
            let length = text.len() as i32;
            let converted = pg_sys::pg_server_to_any(
                text.as_ptr() as *const std::ffi::c_char,
                length,
                pg_sys::pg_enc::PG_UTF8 as i32,
            );
            let bytes = if converted as *const u8 == text.as_ptr() {
                text.to_vec()
            } else {
                std::ffi::CStr::from_ptr(converted).to_bytes().to_vec()
            };
            String::from_utf8(bytes).ok()
        })
        .catch_others(|_| None)
        .execute();
        if let Some(converted) = converted {
            return converted;
        }
    }
    text.iter().map(|&byte| byte as char).collect()
}

/// `json` with every character outside ASCII written as a `\u` escape, so
/// that it reads the same in any server encoding. (Non-ASCII characters
/// can only occur inside JSON strings, where the escape means the same.)
pub fn ascii_json(json: &str) -> String {
    let mut escaped = String::with_capacity(json.len());
    for character in json.chars() {
        if character.is_ascii() {
            escaped.push(character);
        } else {
            for unit in character.encode_utf16(&mut [0; 2]) {
                escaped.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    escaped
}

/// Whether a refusal's JSON DETAIL must be written in ASCII: in a database
/// whose encoding is not UTF8.
pub fn json_needs_ascii() -> bool {
    !database_is_utf8()
}

/// `text` for a view (see the module documentation): the bytes of a value
/// in the database encoding.
pub fn for_view(text: &[u8]) -> Vec<u8> {
    if database_is_utf8() {
        return text.to_vec();
    }
    // SAFETY: reads backend-local settings and the catalog (inside the
    // caller's transaction); the conversion is asked not to raise
    // (noError), and every pointer and length below stays within `text`
    // and `converted`.
    unsafe {
        let encoding = pg_sys::GetDatabaseEncoding();
        let utf8 = pg_sys::pg_enc::PG_UTF8 as i32;
        let procedure = if encoding == pg_sys::pg_enc::PG_SQL_ASCII as i32 {
            pg_sys::InvalidOid
        } else {
            pg_sys::FindDefaultConversionProc(encoding, utf8)
        };
        let mut shown = Vec::with_capacity(text.len());
        // A character converts to at most 4 bytes per byte (MAX_CONVERSION_GROWTH).
        let mut converted = [0u8; 64];
        let mut at = 0;
        while at < text.len() {
            let byte = text[at];
            if byte == b'\\' {
                shown.extend_from_slice(b"\\\\");
                at += 1;
                continue;
            }
            if byte.is_ascii() {
                shown.push(byte);
                at += 1;
                continue;
            }
            let rest = &text[at..];
            let length = pg_sys::pg_encoding_verifymbchar(
                encoding,
                rest.as_ptr().cast(),
                rest.len().min(i32::MAX as usize) as i32,
            );
            let length = if length > 0 && length as usize <= rest.len().min(8) {
                length as usize
            } else {
                0
            };
            let converts = length > 0
                && procedure != pg_sys::InvalidOid
                && pg_sys::pg_do_encoding_conversion_buf(
                    procedure,
                    encoding,
                    utf8,
                    rest.as_ptr().cast_mut(),
                    length as i32,
                    converted.as_mut_ptr(),
                    converted.len() as i32,
                    true,
                ) == length as i32;
            if converts {
                shown.extend_from_slice(&rest[..length]);
                at += length;
            } else {
                // A byte at a time: what follows may still convert.
                let escaped = length.max(1);
                for &byte in &rest[..escaped] {
                    shown.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
                }
                at += escaped;
            }
        }
        shown
    }
}
