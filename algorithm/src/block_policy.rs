//! Automatic blocks (docs/blocks.md, "Automatic blocks"): the policy of
//! `with_block(config, block_for, max_block, forget_after)` and the block
//! the admitted call that uses a limit up starts.

use crate::error::LimitError;
use crate::time::Micros;

/// The automatic blocks of a limit (SQL `with_block(config, block_for,
/// max_block, forget_after)`), durations in microseconds (as a period is:
/// a month is 30 days, a year 365.25 days).
///
/// Invariants after [`BlockPolicy::validate`]: `block_for` > 0,
/// `max_block` (when given) >= `block_for`, `forget_after` >= 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockPolicy {
    /// The first block's length.
    pub block_for: Micros,
    /// The longest block (`None`: no bound; a block whose end would not
    /// fit a timestamp lasts forever, until `unblock`).
    pub max_block: Option<Micros>,
    /// How long after a block ends the key's strikes are remembered.
    pub forget_after: Micros,
}

/// A key's block as stored (a row of `rate_limiter.blocks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strikes {
    /// The end of the block (microseconds since 2000-01-01 UTC;
    /// `i64::MAX` is forever).
    pub until: Micros,
    /// The blocks the key has had since its strikes were last forgotten.
    pub strikes: i32,
    /// When the strikes are forgotten (`None`: when the block ends, as for
    /// a block made by hand).
    pub forget_at: Option<Micros>,
}

/// Whether an admitted call that left `remaining` tokens used the limit
/// up: after it, a call of count 1 would be refused (for a sharded limit,
/// `remaining` is the estimate for the whole limit).
pub fn uses_up(remaining: f64) -> bool {
    remaining < 1.0
}

impl BlockPolicy {
    /// Checks every field; the error names the offending parameter.
    ///
    /// Errors: `InvalidParameter` for `block_for` <= 0, `max_block` <
    /// `block_for`, `forget_after` < 0.
    pub fn validate(&self) -> Result<(), LimitError> {
        if self.block_for <= 0 {
            return Err(LimitError::invalid(
                "block_for",
                "block_for must be greater than zero".to_string(),
            ));
        }
        if self
            .max_block
            .is_some_and(|max_block| max_block < self.block_for)
        {
            return Err(LimitError::invalid(
                "max_block",
                "max_block must be at least block_for".to_string(),
            ));
        }
        if self.forget_after < 0 {
            return Err(LimitError::invalid(
                "forget_after",
                "forget_after must not be negative".to_string(),
            ));
        }
        Ok(())
    }

    /// The block that the admitted call which used the limit up starts at
    /// `now`, given the key's stored block (`None`: none): strikes are
    /// counted from the stored ones while they are remembered (`now` before
    /// their `forget_at`), else from zero; the block lasts `block_for *
    /// 2^strikes` (saturating), at most `max_block`, and never ends before
    /// a block in force; the strikes are forgotten `forget_after` after it
    /// ends. Sums that overflow saturate at `i64::MAX` (forever).
    pub fn strike(&self, previous: Option<Strikes>, now: Micros) -> Strikes {
        let remembered = previous
            .filter(|stored| now < stored.forget_at.unwrap_or(stored.until))
            .map_or(0, |stored| stored.strikes.max(0));
        let doubled = if remembered >= 63 {
            Micros::MAX
        } else {
            self.block_for.saturating_mul(1i64 << remembered)
        };
        let duration = self
            .max_block
            .map_or(doubled, |max_block| doubled.min(max_block));
        let in_force = previous.map_or(Micros::MIN, |stored| stored.until);
        let until = now.saturating_add(duration).max(in_force);
        Strikes {
            until,
            strikes: remembered.saturating_add(1),
            forget_at: Some(until.saturating_add(self.forget_after)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Micros = 1_000_000;

    fn policy(max_block: Option<Micros>) -> BlockPolicy {
        BlockPolicy {
            block_for: 300 * SECOND,
            max_block,
            forget_after: 86_400 * SECOND,
        }
    }

    #[test]
    fn blocks_double_up_to_max_block() {
        let policy = policy(Some(3_600 * SECOND));
        let first = policy.strike(None, 4 * SECOND);
        assert_eq!(first.until, 304 * SECOND);
        assert_eq!(first.strikes, 1);
        assert_eq!(first.forget_at, Some((304 + 86_400) * SECOND));
        let second = policy.strike(Some(first), 308 * SECOND);
        assert_eq!((second.until, second.strikes), (908 * SECOND, 2));
        let third = policy.strike(Some(second), 1_000 * SECOND);
        assert_eq!((third.until, third.strikes), (2_200 * SECOND, 3));
        let fourth = policy.strike(Some(third), 2_300 * SECOND);
        assert_eq!((fourth.until, fourth.strikes), (4_700 * SECOND, 4));
        // 4800 s would pass the hour: capped.
        let fifth = policy.strike(Some(fourth), 4_800 * SECOND);
        assert_eq!((fifth.until, fifth.strikes), (8_400 * SECOND, 5));
    }

    #[test]
    fn strikes_are_forgotten_forget_after_the_block_ends() {
        let policy = policy(None);
        let first = policy.strike(None, 0);
        let forget_at = first.forget_at.unwrap();
        let remembered = policy.strike(Some(first), forget_at - 1);
        assert_eq!(remembered.strikes, 2);
        let forgotten = policy.strike(Some(first), forget_at);
        assert_eq!(
            (forgotten.until, forgotten.strikes),
            (forget_at + 300 * SECOND, 1)
        );
        // A block made by hand (no forget_at) is forgotten when it ends.
        let by_hand = Strikes {
            until: 50 * SECOND,
            strikes: 3,
            forget_at: None,
        };
        assert_eq!(policy.strike(Some(by_hand), 49 * SECOND).strikes, 4);
        assert_eq!(policy.strike(Some(by_hand), 50 * SECOND).strikes, 1);
    }

    #[test]
    fn a_longer_block_in_force_is_kept() {
        let by_hand = Strikes {
            until: 10_000 * SECOND,
            strikes: 0,
            forget_at: None,
        };
        let next = policy(None).strike(Some(by_hand), 0);
        assert_eq!((next.until, next.strikes), (10_000 * SECOND, 1));
    }

    #[test]
    fn endless_doubling_saturates() {
        let policy = policy(None);
        let many = Strikes {
            until: 100,
            strikes: i32::MAX,
            forget_at: Some(Micros::MAX),
        };
        let next = policy.strike(Some(many), 0);
        assert_eq!(
            (next.until, next.strikes, next.forget_at),
            (Micros::MAX, i32::MAX, Some(Micros::MAX))
        );
        let forty = Strikes {
            until: 100,
            strikes: 40,
            forget_at: Some(Micros::MAX),
        };
        assert_eq!(policy.strike(Some(forty), 0).until, Micros::MAX);
    }

    #[test]
    fn a_policy_is_checked() {
        assert!(policy(None).validate().is_ok());
        assert!(policy(Some(300 * SECOND)).validate().is_ok());
        assert_eq!(
            policy(Some(SECOND)).validate().unwrap_err().parameter,
            "max_block"
        );
        let zero = BlockPolicy {
            block_for: 0,
            ..policy(None)
        };
        assert_eq!(zero.validate().unwrap_err().parameter, "block_for");
        let negative = BlockPolicy {
            forget_after: -1,
            ..policy(None)
        };
        assert_eq!(negative.validate().unwrap_err().parameter, "forget_after");
    }

    #[test]
    fn using_up_is_leaving_less_than_one_token() {
        assert!(uses_up(0.0));
        assert!(uses_up(0.999));
        assert!(uses_up(-3.0));
        assert!(!uses_up(1.0));
    }
}
