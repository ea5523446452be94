//! Statistics (docs/guarantees.md, "Statistics and shadow mode"): counters
//! per (database, limit name) in shared memory, summed over every backend
//! since the last reset, read through the view `rate_limiter.stats` and
//! zeroed by `rate_limiter.stats_reset(name)`.
//!
//! They need `shared_preload_libraries = 'rate_limiter'`: the shared memory
//! is set aside when the server starts. Without it every call works as
//! before and counts nothing, and reading the view is `55000` with a hint.
//!
//! - [`shared`]: the table in shared memory, its lock, and eviction;
//! - [`view`]: the SQL functions behind `rate_limiter.stats`,
//!   `rate_limiter.stats_info` and `rate_limiter.stats_reset()`, and how a
//!   name is shown;
//! - this module: what a call counts, kept in the backend until it is
//!   published.
//!
//! **Never in the way.** A call adds its decision to counts kept in the
//! backend; they are added to the shared counters when the transaction
//! ends (committed or rolled back: counting is not transactional, a
//! rolled-back decision counts), when the backend reads the view, and
//! whenever 1,024 decisions or 64 names are pending, so a long transaction
//! shows its counts as it goes. Adding cannot fail: no allocation from
//! PostgreSQL, no error, no wait but for the LWLock (held for a hash
//! lookup, or for an eviction of a few hundred entries at most). Counters
//! start from zero when the server starts (also after a crash restart).

pub mod shared;
pub mod view;

use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::Verdict;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Called once from `_PG_init`: when the library is being preloaded,
/// defines `rate_limiter.stats_max`, asks for the shared memory and
/// registers the transaction callback that publishes the counts.
/// Otherwise statistics stay off.
pub fn init() {
    // SAFETY: reads a flag PostgreSQL sets before loading preloaded
    // libraries; the hooks are installed once, in the postmaster.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        shared::install();
        pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
    }
}

/// One consuming decision, as it is counted.
#[derive(Debug, Clone, Copy)]
pub struct Counted {
    pub verdict: Verdict,
    /// Tokens asked for.
    pub count: f64,
    /// Admitted with a `retry_after` (a reservation).
    pub reserved: bool,
    /// Admitted, leaving less than 20% of capacity.
    pub near_limit: bool,
    /// A sharded call that passed over or waited for a locked shard.
    pub contended: bool,
    /// Refused (enforcing) because the key is blocked (docs/blocks.md).
    pub blocked: bool,
}

fn add_f64(cell: &AtomicU64, amount: f64) {
    let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
        Some((f64::from_bits(bits) + amount).to_bits())
    });
}

/// Counts not yet added to the shared counters: this backend's decisions
/// of the current transaction, per name.
#[derive(Default, Clone, Copy)]
struct Pending {
    admitted: u64,
    refused: u64,
    reserved: u64,
    near_limit: u64,
    shadow_refused: u64,
    contended: u64,
    blocked: u64,
    tokens: f64,
    credited: f64,
    /// Whether the name has a definition (looked up when it was first
    /// pending): eviction keeps defined names' counters.
    defined: bool,
}

impl Pending {
    fn decisions(&self) -> u64 {
        self.admitted + self.refused + self.shadow_refused
    }
}

thread_local! {
    static PENDING: RefCell<HashMap<Vec<u8>, Pending>> = RefCell::new(HashMap::new());
    /// Decisions in `PENDING`.
    static PENDING_DECISIONS: Cell<usize> = const { Cell::new(0) };
}

/// The most names, and decisions, a backend keeps pending before it adds
/// them to the shared counters in the middle of a transaction: a long
/// transaction's counts show with at most this delay, and the memory is
/// bounded.
const MAX_PENDING_NAMES: usize = 64;
const MAX_PENDING_DECISIONS: usize = 1024;

/// Adds `pending` to a shared entry.
fn publish(entry: &shared::Entry, pending: &Pending) {
    let add = |cell: &AtomicU64, amount: u64| {
        if amount > 0 {
            cell.fetch_add(amount, Ordering::Relaxed);
        }
    };
    add(&entry.admitted, pending.admitted);
    add(&entry.refused, pending.refused);
    add(&entry.reserved, pending.reserved);
    add(&entry.near_limit, pending.near_limit);
    add(&entry.shadow_refused, pending.shadow_refused);
    add(&entry.contended, pending.contended);
    add(&entry.blocked, pending.blocked);
    if pending.tokens != 0.0 {
        add_f64(&entry.tokens, pending.tokens);
    }
    if pending.credited != 0.0 {
        add_f64(&entry.credited, pending.credited);
    }
}

/// Runs `change` on the pending counts of `name`, then adds every pending
/// count to the shared counters if too many are pending. A name new to
/// the pending counts is looked up once (the definitions cache: the call
/// resolved it already) to learn whether it is defined.
fn pend(name: &[u8], change: impl FnOnce(&mut Pending)) {
    if !shared::enabled() {
        return;
    }
    let known = PENDING.with(|pending| pending.borrow().contains_key(name));
    let defined = !known && crate::definitions::is_defined(name);
    let full = PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        match pending.get_mut(name) {
            Some(counts) => change(counts),
            None => {
                let mut counts = Pending {
                    defined,
                    ..Pending::default()
                };
                change(&mut counts);
                pending.insert(name.to_vec(), counts);
            }
        }
        let decisions = PENDING_DECISIONS.with(|cell| {
            cell.set(cell.get() + 1);
            cell.get()
        });
        pending.len() >= MAX_PENDING_NAMES || decisions >= MAX_PENDING_DECISIONS
    });
    if full {
        flush();
    }
}

/// Counts one decision of limit `name` (does nothing when statistics are
/// off). The count is kept in the backend and added to the shared
/// counters when the transaction ends (commit or rollback: counting is not
/// transactional), when the backend reads `rate_limiter.stats`, or when
/// many are pending, as PostgreSQL's cumulative statistics publish a
/// transaction's counts: the call itself touches no shared memory.
pub fn count(name: &[u8], counted: Counted) {
    pend(name, |pending| {
        match counted.verdict {
            Verdict::Admitted => {
                pending.admitted += 1;
                pending.tokens += counted.count;
                pending.reserved += u64::from(counted.reserved);
                pending.near_limit += u64::from(counted.near_limit);
            }
            Verdict::Refused => pending.refused += 1,
            Verdict::ShadowRefused => pending.shadow_refused += 1,
        }
        pending.contended += u64::from(counted.contended);
        pending.blocked += u64::from(counted.blocked);
    });
}

/// Counts `count` tokens given back to limit `name` (`rate_credit`).
pub fn credited(name: &[u8], count: f64) {
    pend(name, |pending| pending.credited += count);
}

/// Adds this backend's pending counts to the shared counters. The
/// decisions of a name that found no room are counted as uncounted.
pub fn flush() {
    if !shared::enabled() {
        return;
    }
    PENDING_DECISIONS.with(|cell| cell.set(0));
    // Taken out first: with_entry may not run while PENDING is borrowed.
    let pending = PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()));
    for (name, counts) in &pending {
        if !shared::with_entry(name, counts.defined, |entry| publish(entry, counts)) {
            shared::info()
                .uncounted
                .fetch_add(counts.decisions(), Ordering::Relaxed);
        }
    }
}

/// Transaction callback (registered in the postmaster when preloaded):
/// publishes the pending counts when a transaction ends, committed,
/// rolled back or prepared.
#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    if crate::transaction_end::ends(event) {
        flush();
    }
}
