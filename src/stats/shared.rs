//! The statistics' shared memory: one table of counted names for every
//! database of the server, its lock, and the server-wide counts of names
//! evicted and decisions not counted.
//!
//! **Layout.** One shared hash table (PostgreSQL's dynahash, as
//! `pg_stat_statements` keeps its entries) of at most
//! `rate_limiter.stats_max` entries, one LWLock, and a small block of
//! server-wide counters ([`Info`]). An entry is keyed by the database, the
//! name's length and a 64-bit hash of the name (two names of one database
//! would share an entry only if they had the same length and hash); it
//! keeps the first [`MAX_STORED_NAME`] bytes of the name, cut at a
//! character boundary, for the view. The counters are atomics: a backend
//! takes the lock shared, finds its entry and adds to it, so backends never
//! wait for each other. Only a name not yet in the table takes the lock
//! exclusively, to add its entry; when the table is full, the entries
//! `rate_limiter_algorithm::eviction` chooses make room (names anyone can
//! invent never push out defined limits, and no database takes another's
//! room), or, when none may go, the name's decisions are not counted
//! (and [`Info::uncounted`] says how many were not).
//!
//! Nothing here raises an error or allocates from PostgreSQL while the lock
//! is held.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use rate_limiter_algorithm::eviction::{self, Newcomer, Occupant};
use std::ffi::CStr;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The most bytes of a name an entry keeps for the view. Longer names are
/// counted apart (by their whole bytes) and shown cut, with a marker that
/// keeps them distinct (`super::view`).
pub const MAX_STORED_NAME: usize = 256;

/// `rate_limiter.stats_max`: the most names counted (a postmaster setting).
static STATS_MAX: GucSetting<i32> = GucSetting::<i32>::new(5000);

const TRANCHE: &CStr = c"rate_limiter";
const TABLE_NAME: &CStr = c"rate_limiter statistics";
const INFO_NAME: &CStr = c"rate_limiter statistics info";

/// The identity of an entry (dynahash compares and hashes it bytewise:
/// `repr(C)` with no padding).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct EntryKey {
    pub database: pg_sys::Oid,
    /// The name's length in bytes.
    pub length: u32,
    /// SipHash of the name's bytes, with fixed keys (the same in every
    /// backend, which all run this library).
    pub hash: u64,
}

/// One counted name. Lives in shared memory; the counters are changed only
/// with atomic operations, under the lock held shared (or exclusive).
#[repr(C)]
pub struct Entry {
    /// First, as dynahash requires.
    pub key: EntryKey,
    // calls = admitted + refused + shadow_refused, summed when read (one
    // atomic add fewer per call).
    pub admitted: AtomicU64,
    pub refused: AtomicU64,
    pub reserved: AtomicU64,
    pub near_limit: AtomicU64,
    pub shadow_refused: AtomicU64,
    pub contended: AtomicU64,
    /// Refusals of a blocked key (docs/blocks.md), also in `refused`.
    pub blocked: AtomicU64,
    /// f64 bits.
    pub tokens: AtomicU64,
    /// f64 bits.
    pub credited: AtomicU64,
    /// When the counters started (a `timestamptz`).
    pub reset_at: AtomicI64,
    /// Whether the name had a definition when last counted.
    pub defined: AtomicBool,
    pub stored_length: u32,
    pub name: [u8; MAX_STORED_NAME],
}

impl Entry {
    /// Consuming decisions counted: every decision is exactly one of
    /// admitted, refused and shadow-refused.
    pub fn calls(&self) -> u64 {
        let load = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        load(&self.admitted)
            .wrapping_add(load(&self.refused))
            .wrapping_add(load(&self.shadow_refused))
    }

    /// The stored first bytes of the name.
    pub fn stored_name(&self) -> &[u8] {
        &self.name[..(self.stored_length as usize).min(MAX_STORED_NAME)]
    }

    /// Zeroes the counters and restarts their clock at `now`.
    pub fn reset(&self, now: i64) {
        for cell in [
            &self.admitted,
            &self.refused,
            &self.reserved,
            &self.near_limit,
            &self.shadow_refused,
            &self.contended,
            &self.blocked,
        ] {
            cell.store(0, Ordering::Relaxed);
        }
        self.tokens.store(0f64.to_bits(), Ordering::Relaxed);
        self.credited.store(0f64.to_bits(), Ordering::Relaxed);
        self.reset_at.store(now, Ordering::Relaxed);
    }
}

/// Server-wide counters, beside the table (`rate_limiter.stats_info`).
#[repr(C)]
pub struct Info {
    /// Entries evicted to make room for another name (as
    /// `pg_stat_statements_info.dealloc`).
    pub evicted: AtomicU64,
    /// Consuming decisions not counted: their name found no room.
    pub uncounted: AtomicU64,
    /// When these two started (server start).
    pub since: AtomicI64,
}

/// Set in the postmaster when the shared memory is made; inherited by every
/// backend. Null when the library was not preloaded.
static mut LOCK: *mut pg_sys::LWLock = std::ptr::null_mut();
static mut TABLE: *mut pg_sys::HTAB = std::ptr::null_mut();
static mut INFO: *mut Info = std::ptr::null_mut();
static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// Called from `_PG_init` (through `stats::init`) while the library is
/// being preloaded: defines `rate_limiter.stats_max` and asks for the
/// shared memory.
///
/// # Safety
/// Only while `shared_preload_libraries` is being processed.
pub unsafe fn install() {
    GucRegistry::define_int_guc(
        c"rate_limiter.stats_max",
        c"The most limit names rate_limiter.stats counts (set at server start).",
        c"Past it, the least-used names are evicted: names without a definition first, and no database takes another's share.",
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
}

fn max_entries() -> i64 {
    i64::from(STATS_MAX.get())
}

#[pg_guard]
unsafe extern "C-unwind" fn request_shared_memory() {
    if let Some(previous) = PREVIOUS_REQUEST_HOOK {
        previous();
    }
    pg_sys::RequestAddinShmemSpace(
        pg_sys::hash_estimate_size(max_entries() as _, std::mem::size_of::<Entry>())
            + std::mem::size_of::<Info>(),
    );
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
    let mut found = false;
    let info = pg_sys::ShmemInitStruct(INFO_NAME.as_ptr(), std::mem::size_of::<Info>(), &mut found)
        as *mut Info;
    if !found {
        std::ptr::write(
            info,
            Info {
                evicted: AtomicU64::new(0),
                uncounted: AtomicU64::new(0),
                since: AtomicI64::new(pg_sys::GetCurrentTimestamp()),
            },
        );
    }
    INFO = info;
    let mut hash = pg_sys::HASHCTL {
        keysize: std::mem::size_of::<EntryKey>(),
        entrysize: std::mem::size_of::<Entry>(),
        ..Default::default()
    };
    TABLE = pg_sys::ShmemInitHash(
        TABLE_NAME.as_ptr(),
        max_entries() as _,
        max_entries() as _,
        &mut hash,
        (pg_sys::HASH_ELEM | pg_sys::HASH_BLOBS) as i32,
    );
    pg_sys::LWLockRelease(init_lock);
}

/// Whether statistics are on (the library was preloaded).
pub fn enabled() -> bool {
    // SAFETY: set once in the postmaster, read-only afterwards.
    unsafe { !TABLE.is_null() }
}

/// The server-wide counters (statistics must be on).
pub fn info() -> &'static Info {
    // SAFETY: set once in the postmaster; lives as long as the server.
    unsafe { &*INFO }
}

/// The key of `name` in the current database.
pub fn key_of(name: &[u8]) -> EntryKey {
    let mut hasher = std::hash::DefaultHasher::new();
    name.hash(&mut hasher);
    EntryKey {
        // SAFETY: set when the backend connected to its database.
        database: unsafe { pg_sys::MyDatabaseId },
        length: name.len() as u32,
        hash: hasher.finish(),
    }
}

/// Runs `add` on the entry of `name` (whose definition exists when
/// `defined`), adding the entry if needed. Returns false when the name
/// found no room (nothing was added).
pub fn with_entry(name: &[u8], defined: bool, add: impl FnOnce(&Entry)) -> bool {
    let key = key_of(name);
    // SAFETY: the table and lock live as long as the server; entries are
    // removed only under the exclusive lock, so a pointer found under the
    // shared lock stays valid until it is released. Nothing here raises an
    // error while the lock is held.
    unsafe {
        pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_SHARED);
        let entry = find(&key, pg_sys::HASHACTION::HASH_FIND, &mut false);
        if !entry.is_null() {
            (*entry).defined.store(defined, Ordering::Relaxed);
            add(&*entry);
            pg_sys::LWLockRelease(LOCK);
            return true;
        }
        pg_sys::LWLockRelease(LOCK);
        pg_sys::LWLockAcquire(LOCK, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let mut entry = find(&key, pg_sys::HASHACTION::HASH_FIND, &mut found);
        if entry.is_null() {
            if pg_sys::hash_get_num_entries(TABLE) as i64 >= max_entries() {
                make_room(key.database, defined);
            }
            if (pg_sys::hash_get_num_entries(TABLE) as i64) < max_entries() {
                entry = find(&key, pg_sys::HASHACTION::HASH_ENTER_NULL, &mut found);
                if !entry.is_null() && !found {
                    initialize(entry, key, name, defined);
                }
            }
        }
        let counted = !entry.is_null();
        if counted {
            (*entry).defined.store(defined, Ordering::Relaxed);
            add(&*entry);
        }
        pg_sys::LWLockRelease(LOCK);
        counted
    }
}

/// dynahash's lookup of `key`.
unsafe fn find(key: &EntryKey, action: pg_sys::HASHACTION::Type, found: &mut bool) -> *mut Entry {
    pg_sys::hash_search(TABLE, (key as *const EntryKey).cast(), action, found).cast()
}

/// Fills a new entry: counters zero, started now, the name's first bytes.
unsafe fn initialize(entry: *mut Entry, key: EntryKey, name: &[u8], defined: bool) {
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
            blocked: AtomicU64::new(0),
            tokens: AtomicU64::new(0f64.to_bits()),
            credited: AtomicU64::new(0f64.to_bits()),
            reset_at: AtomicI64::new(pg_sys::GetCurrentTimestamp()),
            defined: AtomicBool::new(defined),
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

/// Evicts what the policy (`rate_limiter_algorithm::eviction`) chooses to
/// make room for a name of `database` (`defined`: it has a definition),
/// counting the evictions. Called with the lock held exclusively.
unsafe fn make_room(database: pg_sys::Oid, defined: bool) {
    let mut keys: Vec<EntryKey> = Vec::new();
    let mut occupants: Vec<Occupant> = Vec::new();
    each_entry(|entry| {
        keys.push(entry.key);
        occupants.push(Occupant {
            database: entry.key.database.to_u32(),
            defined: entry.defined.load(Ordering::Relaxed),
            calls: entry.calls(),
        });
    });
    let capacity = max_entries().max(1) as usize;
    let newcomer = Newcomer {
        database: database.to_u32(),
        defined,
    };
    let chosen = eviction::victims(&occupants, newcomer, capacity, capacity / 20);
    for index in &chosen {
        find(&keys[*index], pg_sys::HASHACTION::HASH_REMOVE, &mut false);
    }
    info()
        .evicted
        .fetch_add(chosen.len() as u64, Ordering::Relaxed);
}

/// Visits every entry.
///
/// # Safety
/// The lock must be held ([`locked`]); `visit` must not raise an error.
pub unsafe fn each_entry(mut visit: impl FnMut(&Entry)) {
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

/// Runs `read` with the lock held in `mode` (shared to read, exclusive to
/// reset). `read` must not raise an error or allocate from PostgreSQL.
pub fn locked<T>(exclusive: bool, read: impl FnOnce() -> T) -> T {
    let mode = if exclusive {
        pg_sys::LWLockMode::LW_EXCLUSIVE
    } else {
        pg_sys::LWLockMode::LW_SHARED
    };
    // SAFETY: as in `with_entry`.
    unsafe {
        pg_sys::LWLockAcquire(LOCK, mode);
        let result = read();
        pg_sys::LWLockRelease(LOCK);
        result
    }
}
