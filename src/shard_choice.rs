//! The random numbers behind the choice of shards (see
//! `storage/shards.rs`): the thread-local generator of `rand`, or, while
//! the superuser-only setting `rate_limiter.random_seed` is set, a
//! generator seeded with it, so that a session's sequence of shard choices
//! is the same every time (for deterministic tests).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;

thread_local! {
    /// `Some` while `rate_limiter.random_seed` is set.
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Starts the sequence again from `seed`; `None` goes back to real
/// randomness. Called when `rate_limiter.random_seed` is assigned.
pub fn reseed(seed: Option<i64>) {
    let generator = seed.map(|seed| StdRng::seed_from_u64(seed as u64));
    SEEDED.with(|seeded| *seeded.borrow_mut() = generator);
}

/// Three random numbers for one shard order.
pub fn draw() -> [u32; 3] {
    SEEDED.with(|seeded| match seeded.borrow_mut().as_mut() {
        Some(generator) => generator.random(),
        None => rand::rng().random(),
    })
}
