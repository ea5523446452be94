//! Statistics (SPEC §11): counters per (database, limit name) in shared
//! memory, summed over every backend since the last reset, read through the
//! view `rate_limiter.stats` (the function `rate_limiter._stats()`) and
//! zeroed by `rate_limiter.stats_reset(name)`.
//!
//! They need `shared_preload_libraries = 'rate_limiter'`: the shared memory
//! is set aside when the server starts. Without it every call works as
//! before and counts nothing, and reading the view is `55000` with a hint.
//!
//! **Layout.** One shared hash table (PostgreSQL's dynahash, as
//! `pg_stat_statements` keeps its entries) of at most
//! `rate_limiter.stats_max` entries, and one LWLock. An entry is keyed by
//! the database, the name's length and a 64-bit hash of the name (two
//! names of one database would share an entry only if they had the same
//! length and hash); it keeps the first [`MAX_STORED_NAME`] bytes of the
//! name, cut at a character boundary, for the view. The counters are
//! atomics: a call takes the lock shared, finds its entry and adds to it,
//! so calls never wait for each other. Only a call for a name not yet in
//! the table takes the lock exclusively, to add the entry; when the table
//! is full it first evicts the least-used 5% of the entries (fewest calls,
//! of any database), as `pg_stat_statements` does.
//!
//! **Never in the way.** A call adds its decision to counts kept in the
//! backend; they are added to the shared counters when the transaction
//! ends (committed or rolled back: counting is not transactional, a
//! rolled-back decision counts), when the backend reads the view, and
//! whenever 1,024 decisions or 64 names are pending, so a long transaction
//! shows its counts as it goes. Adding cannot fail: no allocation from
//! PostgreSQL, no error, no wait but for the LWLock (held for a hash
//! lookup, or for an eviction of a few thousand entries at most). Counters
//! start from zero when the server starts (also after a crash restart).

use crate::errors::{report, CallError};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::Verdict;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::CStr;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The most bytes of a name an entry keeps for the view. Longer names are
/// counted apart (by their whole bytes) but shown cut to this length.
pub const MAX_STORED_NAME: usize = 256;

/// `rate_limiter.stats_max`: the most names counted (a postmaster setting).
static STATS_MAX: GucSetting<i32> = GucSetting::<i32>::new(5000);

const TRANCHE: &CStr = c"rate_limiter";
const TABLE_NAME: &CStr = c"rate_limiter statistics";

/// The identity of an entry (dynahash compares and hashes it bytewise:
/// `repr(C)` with no padding).
#[repr(C)]
#[derive(Clone, Copy)]
struct EntryKey {
    database: pg_sys::Oid,
    length: u32,
    hash: u64,
}

/// One counted name. Lives in shared memory; the counters are changed only
/// with atomic operations, under the lock held shared (or exclusive).
#[repr(C)]
struct Entry {
    /// First, as dynahash requires.
    key: EntryKey,
    // calls = admitted + refused + shadow_refused, summed when read (one
    // atomic add fewer per call).
    admitted: AtomicU64,
    refused: AtomicU64,
    reserved: AtomicU64,
    near_limit: AtomicU64,
    shadow_refused: AtomicU64,
    contended: AtomicU64,
    /// f64 bits.
    tokens: AtomicU64,
    /// f64 bits.
    credited: AtomicU64,
    /// When the counters started (a `timestamptz`).
    reset_at: AtomicI64,
    stored_length: u32,
    name: [u8; MAX_STORED_NAME],
}

impl Entry {
    /// Consuming decisions counted: every decision is exactly one of
    /// admitted, refused and shadow-refused.
    fn calls(&self) -> u64 {
        let load = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        load(&self.admitted)
            .wrapping_add(load(&self.refused))
            .wrapping_add(load(&self.shadow_refused))
    }
}

/// Set in the postmaster when the shared memory is made; inherited by every
/// backend. Null when the library was not preloaded.
static mut LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
static mut TABLE: *mut pg_sys::HTAB = std::ptr::null_mut();
static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// Called from `_PG_init`: when the library is being preloaded, defines
/// `rate_limiter.stats_max` and asks for the shared memory. Otherwise
/// statistics stay off.
pub fn init() {
    // SAFETY: reads a flag PostgreSQL sets before loading preloaded
    // libraries; the hooks are installed once, in the postmaster.
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        GucRegistry::define_int_guc(
            c"rate_limiter.stats_max",
            c"The most limit names rate_limiter.stats counts (set at server start).",
            c"Past it, the least-used names are evicted.",
            &STATS_MAX,
            100,
            1_000_000,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        PREVIOUS_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shared_memory);
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(make_shared_memory);
        pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
    }
}

fn max_entries() -> i64 {
    i64::from(STATS_MAX.get())
}

#[pg_guard]
unsafe extern "C-unwind" fn request_shared_memory() {
    if let Some(previous) = PREVIOUS_REQUEST_HOOK {
        previous();
    }
    pg_sys::RequestAddinShmemSpace(pg_sys::hash_estimate_size(
        max_entries() as _,
        std::mem::size_of::<Entry>(),
    ));
    pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
}

/// `AddinShmemInitLock`: entry 21 of the main LWLock array in PostgreSQL
/// 15 to 18 (`lwlocknames.txt` / `lwlocklist.h`).
const ADDIN_SHMEM_INIT_LOCK: usize = 21;

#[pg_guard]
unsafe extern "C-unwind" fn make_shared_memory() {
    if let Some(previous) = PREVIOUS_STARTUP_HOOK {
        previous();
    }
    let init_lock =
        std::ptr::addr_of_mut!((*pg_sys::MainLWLockArray.add(ADDIN_SHMEM_INIT_LOCK)).lock);
    pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
    LOCK = std::ptr::addr_of_mut!((*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock);
    let mut info = pg_sys::HASHCTL {
        keysize: std::mem::size_of::<EntryKey>(),
        entrysize: std::mem::size_of::<Entry>(),
        ..Default::default()
    };
    TABLE = pg_sys::ShmemInitHash(
        TABLE_NAME.as_ptr(),
        max_entries() as _,
        max_entries() as _,
        &mut info,
        (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS) as i32,
    );
    pg_sys::LWLockRelease(init_lock);
}

/// Whether statistics are on (the library was preloaded).
pub fn enabled() -> bool {
    // SAFETY: set once in the postmaster, read-only afterwards.
    unsafe { !TABLE.is_null() }
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
    tokens: f64,
    credited: f64,
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
fn publish(entry: &Entry, pending: &Pending) {
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
    if pending.tokens != 0.0 {
        add_f64(&entry.tokens, pending.tokens);
    }
    if pending.credited != 0.0 {
        add_f64(&entry.credited, pending.credited);
    }
}

/// Runs `change` on the pending counts of `name`, then adds every pending
/// count to the shared counters if too many are pending.
fn pend(name: &[u8], change: impl FnOnce(&mut Pending)) {
    if !enabled() {
        return;
    }
    let full = PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        match pending.get_mut(name) {
            Some(counts) => change(counts),
            None => {
                let mut counts = Pending::default();
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
    });
}

/// Counts `count` tokens given back to limit `name` (`rate_credit`).
pub fn credited(name: &[u8], count: f64) {
    pend(name, |pending| pending.credited += count);
}

/// Adds this backend's pending counts to the shared counters.
pub fn flush() {
    if !enabled() {
        return;
    }
    PENDING_DECISIONS.with(|cell| cell.set(0));
    // Taken out first: with_entry may not run while PENDING is borrowed.
    let pending = PENDING.with(|pending| std::mem::take(&mut *pending.borrow_mut()));
    for (name, counts) in &pending {
        with_entry(name, |entry| publish(entry, counts));
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
    use pg_sys::XactEvent::*;
    if matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PREPARE
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_PARALLEL_ABORT
    ) {
        flush();
    }
}

fn key_of(name: &[u8]) -> EntryKey {
    // SipHash with fixed keys: the same in every backend of the server,
    // which all run this library's code.
    let mut hasher = std::hash::DefaultHasher::new();
    name.hash(&mut hasher);
    EntryKey {
        // SAFETY: set when the backend connected to its database.
        database: unsafe { pg_sys::MyDatabaseId },
        length: name.len() as u32,
        hash: hasher.finish(),
    }
}

/// Runs `add` on the entry of `name`, adding the entry if needed (when
/// statistics are on).
fn with_entry(name: &[u8], add: impl FnOnce(&Entry)) {
    let key = key_of(name);
    // SAFETY: the table and lock live as long as the server; entries are
    // removed only under the exclusive lock, so a pointer found under the
    // shared lock stays valid until it is released. Nothing here raises an
    // error while the lock is held.
    unsafe {
        pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_SHARED);
        let entry = find(&key, pg_sys::HASHACTION::HASH_FIND, &mut false);
        if !entry.is_null() {
            add(&*entry);
            pg_sys::LWLockRelease(LOCK);
            return;
        }
        pg_sys::LWLockRelease(LOCK);
        pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE);
        if pg_sys::hash_get_num_entries(TABLE) as i64 >= max_entries() {
            evict();
        }
        let mut found = false;
        let entry = find(&key, pg_sys::HASHACTION::HASH_ENTER_NULL, &mut found);
        if !entry.is_null() {
            if !found {
                initialize(entry, key, name);
            }
            add(&*entry);
        }
        pg_sys::LWLockRelease(LOCK);
    }
}

/// dynahash's lookup of `key`.
unsafe fn find(key: &EntryKey, action: pg_sys::HASHACTION::Type, found: &mut bool) -> *mut Entry {
    pg_sys::hash_search(TABLE, (key as *const EntryKey).cast(), action, found).cast()
}

/// Fills a new entry: counters zero, started now, the name's first bytes.
unsafe fn initialize(entry: *mut Entry, key: EntryKey, name: &[u8]) {
    let stored = stored_length(name);
    let mut bytes = [0u8; MAX_STORED_NAME];
    bytes[..stored].copy_from_slice(&name[..stored]);
    std::ptr::write(
        entry,
        Entry {
            key,
            admitted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            near_limit: AtomicU64::new(0),
            shadow_refused: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            tokens: AtomicU64::new(0f64.to_bits()),
            credited: AtomicU64::new(0f64.to_bits()),
            reset_at: AtomicI64::new(pg_sys::GetCurrentTimestamp()),
            stored_length: stored as u32,
            name: bytes,
        },
    );
}

/// How many of the first bytes of `name` an entry keeps: all of them, or
/// at most [`MAX_STORED_NAME`] cut at a character boundary of the database
/// encoding (names are valid text in it).
fn stored_length(name: &[u8]) -> usize {
    if name.len() <= MAX_STORED_NAME {
        return name.len();
    }
    // SAFETY: pg_mbcliplen reads at most `len` bytes of a valid string and
    // only computes a length.
    let clipped = unsafe {
        pg_sys::pg_mbcliplen(
            name.as_ptr().cast(),
            name.len() as i32,
            MAX_STORED_NAME as i32,
        )
    };
    (clipped.max(0) as usize).min(MAX_STORED_NAME)
}

/// Removes the least-used 5% of the entries (at least one). Called with
/// the lock held exclusively.
unsafe fn evict() {
    let mut entries: Vec<(u64, EntryKey)> = Vec::new();
    each_entry(|entry| entries.push((entry.calls(), entry.key)));
    entries.sort_unstable_by_key(|(calls, _)| *calls);
    let evicted = (entries.len() / 20).max(1);
    for (_, key) in entries.iter().take(evicted) {
        find(key, pg_sys::HASHACTION::HASH_REMOVE, &mut false);
    }
}

/// Visits every entry. Called with the lock held.
unsafe fn each_entry(mut visit: impl FnMut(&Entry)) {
    let mut status = pg_sys::HASH_SEQ_STATUS::default();
    pg_sys::hash_seq_init(&mut status, TABLE);
    loop {
        let entry: *mut Entry = pg_sys::hash_seq_search(&mut status).cast();
        if entry.is_null() {
            break;
        }
        visit(&*entry);
    }
}

/// A row of the view.
struct Row {
    name: Vec<u8>,
    calls: u64,
    admitted: u64,
    refused: u64,
    reserved: u64,
    tokens: f64,
    credited: f64,
    near_limit: u64,
    shadow_refused: u64,
    contended: u64,
    reset_at: i64,
}

fn not_enabled() -> CallError {
    CallError::StatisticsOff
}

/// The rows of this database.
fn rows() -> Result<Vec<Row>, CallError> {
    if !enabled() {
        return Err(not_enabled());
    }
    // This backend's own counts of the current transaction too.
    flush();
    let mut rows = Vec::new();
    // SAFETY: as in `with_entry`; the entries are copied under the lock.
    unsafe {
        let database = pg_sys::MyDatabaseId;
        pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_SHARED);
        each_entry(|entry| {
            if entry.key.database != database {
                return;
            }
            let load = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
            rows.push(Row {
                name: entry.name[..entry.stored_length as usize].to_vec(),
                calls: entry.calls(),
                admitted: load(&entry.admitted),
                refused: load(&entry.refused),
                reserved: load(&entry.reserved),
                tokens: f64::from_bits(load(&entry.tokens)),
                credited: f64::from_bits(load(&entry.credited)),
                near_limit: load(&entry.near_limit),
                shadow_refused: load(&entry.shadow_refused),
                contended: load(&entry.contended),
                reset_at: entry.reset_at.load(Ordering::Relaxed),
            });
        });
        pg_sys::LWLockRelease(LOCK);
    }
    Ok(rows)
}

/// A count as a `bigint` datum (counts never reach 2^63).
fn bigint(value: u64) -> Option<pg_sys::Datum> {
    i64::try_from(value).unwrap_or(i64::MAX).into_datum()
}

/// PostgreSQL's "version 1 calling convention" record.
const CALLING_CONVENTION: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

/// `rate_limiter._stats()`: the rows of the view `rate_limiter.stats`, for
/// the current database. See sql/functions.sql.
///
/// Errors: `55000` when the library was not preloaded.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn stats_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let rows = match rows() {
        Ok(rows) => rows,
        Err(error) => report(error),
    };
    let rows = rows.iter().map(|row| {
        [
            row.name.as_slice().into_datum(),
            bigint(row.calls),
            bigint(row.admitted),
            bigint(row.refused),
            bigint(row.reserved),
            row.tokens.into_datum(),
            row.credited.into_datum(),
            bigint(row.near_limit),
            bigint(row.shadow_refused),
            bigint(row.contended),
            Some(pg_sys::Datum::from(row.reset_at)),
        ]
    });
    crate::result_row::put_rows(fcinfo, rows)
}

#[no_mangle]
pub extern "C" fn pg_finfo_stats_wrapper() -> &'static pg_sys::Pg_finfo_record {
    &CALLING_CONVENTION
}

/// `rate_limiter.stats_reset(name)`: zeroes the counters of `name` (NULL:
/// of every name) of the current database and restarts their clock.
///
/// Errors: `55000` when the library was not preloaded.
#[pg_extern(sql = false)]
fn stats_reset(name: Option<&[u8]>) {
    if !enabled() {
        report(not_enabled());
    }
    flush();
    let wanted = name.map(key_of);
    // SAFETY: as in `with_entry`.
    unsafe {
        let database = pg_sys::MyDatabaseId;
        let now = pg_sys::GetCurrentTimestamp();
        pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE);
        each_entry(|entry| {
            let chosen = match &wanted {
                Some(key) => {
                    entry.key.database == key.database
                        && entry.key.length == key.length
                        && entry.key.hash == key.hash
                }
                None => entry.key.database == database,
            };
            if chosen {
                for cell in [
                    &entry.admitted,
                    &entry.refused,
                    &entry.reserved,
                    &entry.near_limit,
                    &entry.shadow_refused,
                    &entry.contended,
                ] {
                    cell.store(0, Ordering::Relaxed);
                }
                entry.tokens.store(0f64.to_bits(), Ordering::Relaxed);
                entry.credited.store(0f64.to_bits(), Ordering::Relaxed);
                entry.reset_at.store(now, Ordering::Relaxed);
            }
        });
        pg_sys::LWLockRelease(LOCK);
    }
}
