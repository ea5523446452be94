//! How a token amount is shown to a caller (`remaining`, a refusal's
//! DETAIL, `status`'s `value`, `rate_credit`'s result), and the one place
//! where what is shown changes a decision.
//!
//! Token values are floats, and the arithmetic that refills and consumes
//! them leaves noise in their last digits (`0.2922020000000005` for
//! 0.292202, `0.7999999999999999` for 0.8). A value is shown with at most
//! nine decimals: rounded down to a multiple of 10^-9, except that a value
//! within 10^-12 below a multiple (relative to the value when it is more
//! than one token) is that multiple plus noise, and shown as it (the float
//! nearest to the multiple, which prints with at most nine decimals). So
//! `0.2922020000000005` and `0.29220199999999995` are both `0.292202`, a
//! third of a token is `0.333333333`, and a shown value is never more than
//! 10^-12 above the value. Values of 2^53 / 10^9 (about 9.007 million)
//! tokens or more, where a float's own step is about 10^-9, are shown as
//! they are. Both editions compute it with the same IEEE operations, so
//! they show the same float.
//!
//! So that a call asking for exactly the `remaining` it was shown is
//! admitted, an unsharded limit admits a call when the count fits what is
//! shown, not only what is stored ([`available`]): the limit may then go
//! up to 10^-12 tokens (relative) below zero, or below its allowed debt,
//! which the refill pays back like any debt; a `retry_after` moves by at
//! most the time that many tokens take to refill. (docs/semantics.md,
//! "What a call shows".)

/// The scale of the shown grid: 10^9 (nine decimals).
const SCALE: f64 = 1e9;

/// The largest magnitude rounded: above it `value * SCALE` is past 2^53,
/// where floats are no longer whole at every integer.
const ROUNDED_BELOW: f64 = 9_007_199_254_740_992.0 / SCALE;

/// How far below a multiple of 10^-9 a value is noise: 10^-12 tokens, or
/// 10^-12 of the value when it is more than one token.
const NOISE: f64 = 1e-12;

/// `value` as shown to a caller (see the module), never `-0`. NaN and
/// infinities are shown as they are.
pub fn shown(value: f64) -> f64 {
    // (NaN compares false: shown as it is, with the infinities.)
    if value.is_nan() || value.abs() >= ROUNDED_BELOW {
        return value + 0.0;
    }
    let nearest = (value * SCALE).round_ties_even();
    let multiple = if nearest / SCALE - value > NOISE * value.abs().max(1.0) {
        // Rounding up by more than noise: the multiple below instead.
        nearest - 1.0
    } else {
        nearest
    };
    multiple / SCALE + 0.0
}

/// What a call of an unsharded limit may take without going below its
/// allowed debt: the refilled `value`, or what is shown of it when that
/// is more (see the module).
pub fn available(value: f64) -> f64 {
    value.max(shown(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_not_shown() {
        assert_eq!(shown(0.2922020000000005), 0.292202);
        assert_eq!(shown(0.29220199999999995), 0.292202);
        assert_eq!(shown(0.1 + 0.2), 0.3);
        assert_eq!(shown(0.7 + 0.1), 0.8);
        assert_eq!(shown(-2.0000000000000004), -2.0);
        assert_eq!(shown(-1.9999999999999998), -2.0);
        assert_eq!(shown(19.0), 19.0);
    }

    #[test]
    fn other_values_are_rounded_down_to_nine_decimals() {
        assert_eq!(shown(0.00011763888888864478), 0.000117638);
        assert_eq!(shown(1.0 / 3.0), 0.333333333);
        assert_eq!(shown(2.0 / 3.0), 0.666666666);
        assert_eq!(shown(0.9999998333333333), 0.999999833);
        assert_eq!(shown(-16666.666666666668), -16666.666666667);
        assert_eq!(shown(4e-10), 0.0);
        assert_eq!(shown(-4e-10), -1e-9);
    }

    #[test]
    fn a_shown_value_is_at_most_noise_above_the_value() {
        for value in [
            0.2922020000000005,
            0.29220199999999995,
            1.0 / 3.0,
            2.0 / 3.0,
            -4e-10,
            1e-13,
            123.456_789_999_999_99,
        ] {
            assert!(
                shown(value) - value <= NOISE * value.abs().max(1.0),
                "{value}"
            );
        }
    }

    #[test]
    fn never_negative_zero() {
        assert!(shown(-1e-13).is_sign_positive());
        assert!(shown(1e-13).is_sign_positive());
        assert!(shown(-0.0).is_sign_positive());
    }

    #[test]
    fn large_values_and_non_finite_ones_are_shown_as_they_are() {
        assert_eq!(shown(12_345_678.900_000_002), 12_345_678.900_000_002);
        assert_eq!(shown(1e300), 1e300);
        assert_eq!(shown(f64::INFINITY), f64::INFINITY);
        assert!(shown(f64::NAN).is_nan());
    }

    #[test]
    fn showing_twice_changes_nothing() {
        for value in [
            0.2922020000000005,
            1.0 / 3.0,
            -7.123_456_789_000_001,
            9_000_000.123_456_79,
        ] {
            assert_eq!(shown(shown(value)), shown(value));
        }
    }

    #[test]
    fn available_is_never_less_than_the_value() {
        assert_eq!(available(0.29220199999999995), 0.292202);
        assert_eq!(available(0.2922020000000005), 0.2922020000000005);
    }
}
