//! The random numbers behind the choice of shards (see
//! `storage/shards.rs`): the thread-local generator of `rand`, or, while
//! the superuser-only setting `rate_limiter.random_seed` is set, SplitMix64
//! seeded with it, so that a session's sequence of shard choices is the
//! same every time (for deterministic tests), and the same as the portable
//! edition's (`portable/sql/30_settings.sql`, `_draw`), whose expected
//! test output is the native one.
//!
//! SplitMix64 is Steele, Lea and Flood's generator ("Fast splittable
//! pseudorandom number generators", OOPSLA 2014) with the constants of
//! Vigna's reference `splitmix64.c` (prng.di.unimi.it): small enough to
//! write in PL/pgSQL, which the portable edition must, and stable (a
//! library's seeded generator may change its sequence between versions).

use rand::Rng;
use std::cell::Cell;

thread_local! {
    /// The SplitMix64 state while `rate_limiter.random_seed` is set.
    static SEEDED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// One SplitMix64 step: the next state and the number it gives.
fn splitmix64(state: u64) -> (u64, u64) {
    let state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (state, z ^ (z >> 31))
}

/// Starts the sequence again from `seed`; `None` goes back to real
/// randomness. Called when `rate_limiter.random_seed` is assigned.
pub fn reseed(seed: Option<i64>) {
    SEEDED.with(|seeded| seeded.set(seed.map(|seed| seed as u64)));
}

/// Three random numbers for one shard order: with a seed, the high 32
/// bits of the next three SplitMix64 numbers.
pub fn draw() -> [u32; 3] {
    SEEDED.with(|seeded| match seeded.get() {
        Some(mut state) => {
            let mut numbers = [0u32; 3];
            for number in &mut numbers {
                let (next, value) = splitmix64(state);
                state = next;
                *number = (value >> 32) as u32;
            }
            seeded.set(Some(state));
            numbers
        }
        None => rand::rng().random(),
    })
}
