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

use crate::catalog;
use pgrx::pg_sys;

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
    let objects = catalog::objects();
    let mut user = pg_sys::InvalidOid;
    let mut context = 0;
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            objects.owner,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let mut path = pg_sys::OverrideSearchPath {
            schemas: objects.schemas,
            addCatalog: true,
            addTemp: false,
            generation: 0,
        };
        pg_sys::PushOverrideSearchPath(&mut path);
    }
    let _restore = Restore { user, context };
    body()
}
