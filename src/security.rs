//! Running the extension's statements as the extension's owner, with a
//! pinned search path: what `SECURITY DEFINER ... SET search_path` does,
//! done in Rust around the few SPI statements left (looking up a definition
//! the first time, `define`, `undefine`, `rate_reset`), so that the
//! functions themselves need no `SECURITY DEFINER` and no function-level
//! `SET` (which would cost every call, `rate_limit` included).
//!
//! Callers need EXECUTE on the function (checked by PostgreSQL before the
//! call) and nothing else: inside, statements run as the owner of
//! `rate_limiter.rate_limits` (the role that installed the extension, or the
//! bootstrap superuser for a trusted install) with the search path
//! `pg_catalog, pg_temp` (`pg_temp` last, so it is not searched first), so
//! objects in the caller's schemas cannot change what the statements mean.
//! Not even the extension's own schema is on it: in a trusted install that
//! schema belongs to the installing database owner, who could plant a
//! function or operator there; every reference to the extension's objects
//! is schema-qualified instead.
//!
//! If a statement fails, PostgreSQL's transaction (or subtransaction) abort
//! restores the user and the search path, as it does for
//! `SECURITY DEFINER` functions.

use crate::catalog;
use pgrx::pg_sys;

/// The search path the extension's statements run with: the catalog, and
/// `pg_temp` last (named, so that it is not searched first).
const SEARCH_PATH: &std::ffi::CStr = c"pg_catalog, pg_temp";

/// Restores the caller's user and search path when dropped normally. When
/// unwinding from an error it does nothing: the abort that follows restores
/// both, as it does for `SECURITY DEFINER` functions.
struct Restore {
    user: pg_sys::Oid,
    context: i32,
    /// The GUC nesting level whose settings (the search path) to undo.
    guc_level: i32,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        unsafe {
            pg_sys::AtEOXact_GUC(true, self.guc_level);
            pg_sys::SetUserIdAndSecContext(self.user, self.context);
        }
    }
}

/// Runs `body` as the extension's owner with the search path
/// `pg_catalog, pg_temp`, as `SECURITY DEFINER SET
/// search_path = ...` would (`fmgr_security_definer`: a new GUC nesting
/// level, undone afterwards).
pub fn as_owner<R>(body: impl FnOnce() -> R) -> R {
    let objects = catalog::objects();
    let mut user = pg_sys::InvalidOid;
    let mut context = 0;
    let guc_level = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            objects.owner,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
        let guc_level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            SEARCH_PATH.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        guc_level
    };
    let _restore = Restore {
        user,
        context,
        guc_level,
    };
    body()
}

/// Runs `body` with an SPI connection that may write, as the extension's
/// owner (see [`as_owner`]): what every function that writes through SPI
/// (`define`, `undefine`, `rate_reset`, `prune`) does.
///
/// First raises 25006 (read_only_sql_transaction) naming `function` (e.g.
/// `c"rate_reset()"`) when the transaction may not write (`BEGIN READ
/// ONLY`, or any transaction on a hot standby): pgrx's `Spi::connect_mut`
/// asks for a transaction id, which a standby refuses with an internal
/// error (XX000) before the executor's own read-only check could run.
pub fn write_as_owner<R>(
    function: &std::ffi::CStr,
    body: impl FnOnce(&mut pgrx::spi::SpiClient<'_>) -> R,
) -> R {
    // SAFETY: reads the transaction state; raises an ERROR when read-only.
    unsafe { pgrx::pg_sys::PreventCommandIfReadOnly(function.as_ptr()) };
    as_owner(|| pgrx::spi::Spi::connect_mut(body))
}

/// Fails with 42501 ([`crate::errors::CallError::NotAllowed`], naming
/// `label`) unless the current role may execute the function
/// `signature` (a `regprocedure` text, schema-qualified). For the
/// internal functions Citus delegates that do what a managing function
/// does (`_rate_credit_at`, `_prune_at`): only a role that may call the
/// public function may call them. A missing function (or a failed
/// lookup) allows nobody.
pub fn require_execute(
    signature: &str,
    label: &'static str,
) -> Result<(), crate::errors::CallError> {
    let function = crate::catalog::function(signature);
    // SAFETY: an ACL check inside the caller's transaction.
    let allowed = function != pg_sys::InvalidOid
        && unsafe { crate::compat::may_execute(function, pg_sys::GetUserId()) };
    if allowed {
        Ok(())
    } else {
        Err(crate::errors::CallError::NotAllowed(label))
    }
}
