//! Running the extension's statements as the extension's owner, with a
//! pinned search path: what `SECURITY DEFINER ... SET search_path` would do,
//! done in Rust around the SPI calls because it costs much less (no GUC
//! save and restore on every call; about 2.5 µs per call measured).
//!
//! Callers need EXECUTE on the function (checked by PostgreSQL before the
//! call) and nothing else: inside, statements run as the owner of
//! `rate_limiter.rate_limits` (the role that installed the extension, or the
//! bootstrap superuser for a trusted install) with the search path
//! `pg_catalog, rate_limiter` and no `pg_temp`, so objects in the caller's
//! schemas cannot change what the statements mean. Every statement is also
//! schema-qualified.
//!
//! If a statement fails, PostgreSQL's transaction (or subtransaction) abort
//! restores the user and drops the pushed search path, as it does for
//! `SECURITY DEFINER` functions.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;

/// The owner and the search path to run as, looked up once per backend.
#[derive(Clone, Copy)]
struct Identity {
    owner: pg_sys::Oid,
    /// `[rate_limiter]`, allocated in TopMemoryContext.
    schemas: *mut pg_sys::List,
}

thread_local! {
    static IDENTITY: Cell<Option<Identity>> = const { Cell::new(None) };
}

/// Forgets the identity (the extension may have been dropped and created
/// again); called on every relcache invalidation.
pub fn forget() {
    IDENTITY.with(|identity| identity.set(None));
}

fn identity() -> Identity {
    if let Some(identity) = IDENTITY.with(Cell::get) {
        return identity;
    }
    // SAFETY: plain catalog lookups; they raise an ERROR if the schema is missing.
    let identity = unsafe {
        let schema = pg_sys::get_namespace_oid(c"rate_limiter".as_ptr(), false);
        let table = pg_sys::get_relname_relid(c"rate_limits".as_ptr(), schema);
        if table == pg_sys::InvalidOid {
            error!("rate_limiter.rate_limits does not exist: is the extension installed?");
        }
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::RELOID as i32,
            pg_sys::Datum::from(table),
        );
        if tuple.is_null() {
            error!("cache lookup failed for rate_limiter.rate_limits");
        }
        let owner = (*(pg_sys::GETSTRUCT(tuple) as pg_sys::Form_pg_class)).relowner;
        pg_sys::ReleaseSysCache(tuple);
        let old = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        let schemas = pg_sys::lappend_oid(std::ptr::null_mut(), schema);
        pg_sys::MemoryContextSwitchTo(old);
        Identity { owner, schemas }
    };
    IDENTITY.with(|cell| cell.set(Some(identity)));
    identity
}

/// Restores the caller's user and search path when dropped normally. When
/// unwinding from an error it does nothing: the abort that follows restores
/// both (and popping the search path then could itself raise an error).
struct Restore {
    user: pg_sys::Oid,
    context: i32,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        unsafe {
            pg_sys::PopOverrideSearchPath();
            pg_sys::SetUserIdAndSecContext(self.user, self.context);
        }
    }
}

/// Runs `body` as the extension's owner with the search path
/// `pg_catalog, rate_limiter`.
pub fn as_owner<R>(body: impl FnOnce() -> R) -> R {
    let identity = identity();
    let mut user = pg_sys::InvalidOid;
    let mut context = 0;
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            identity.owner,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let mut path = pg_sys::OverrideSearchPath {
            schemas: identity.schemas,
            addCatalog: true,
            addTemp: false,
            generation: 0,
        };
        pg_sys::PushOverrideSearchPath(&mut path);
    }
    let _restore = Restore { user, context };
    body()
}
