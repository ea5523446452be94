//! Blocks (docs/blocks.md): a key refused until an instant, whatever its
//! tokens. A blocked call consumes nothing and answers `ok = false`,
//! `retry_after = until - now`, `remaining = 0`. When automatic blocks
//! start: `crate::block_policy`.

use crate::decision::Decision;
use crate::time::Micros;

/// The decision of a call at `now` of a key blocked until `until`
/// (microseconds since 2000-01-01 UTC): a refusal that consumes nothing,
/// retry after `until - now` (at least 1 µs, so it never reads as
/// "admitted without debt"), remaining 0. `None` when the block is over
/// (`now >= until`): the call is decided on its tokens.
pub fn blocked(until: Micros, now: Micros) -> Option<Decision> {
    (now < until).then(|| Decision {
        ok: false,
        retry_after: Some(until.saturating_sub(now).max(1)),
        remaining: 0.0,
        new_state: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_refuses_until_its_end() {
        let refused = blocked(304_000_000, 5_000_000).unwrap();
        assert!(!refused.ok);
        assert_eq!(refused.retry_after, Some(299_000_000));
        assert_eq!(refused.remaining, 0.0);
        assert_eq!(refused.new_state, None);
        assert_eq!(
            blocked(304_000_000, 303_999_999).unwrap().retry_after,
            Some(1)
        );
    }

    #[test]
    fn a_block_is_over_at_its_end() {
        assert_eq!(blocked(304_000_000, 304_000_000), None);
        assert_eq!(blocked(i64::MIN, 0), None);
    }

    #[test]
    fn an_endless_block_does_not_overflow() {
        assert_eq!(
            blocked(i64::MAX, i64::MIN + 1).unwrap().retry_after,
            Some(i64::MAX)
        );
    }
}
