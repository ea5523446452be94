//! Statements prepared once per backend and kept: re-planning on every call
//! would cost more than the call itself. Used for the statements that still
//! go through SPI (definition lookups, `rate_reset`).

use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiResult};
use pgrx::PgOid;
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    /// Kept plans, by the address of their (static) SQL text.
    static PLANS: RefCell<HashMap<usize, &'static OwnedPreparedStatement>> = RefCell::new(HashMap::new());
}

/// The kept plan of `sql`, preparing it on first use in this backend.
/// `mutating` plans take a fresh snapshot per execution (READ COMMITTED) and
/// may lock and write; the others run read-only.
pub fn kept_plan(
    client: &SpiClient<'_>,
    sql: &'static str,
    arg_types: &[PgOid],
    mutating: bool,
) -> SpiResult<&'static OwnedPreparedStatement> {
    let slot = sql.as_ptr() as usize;
    if let Some(plan) = PLANS.with(|plans| plans.borrow().get(&slot).copied()) {
        return Ok(plan);
    }
    let prepared = if mutating {
        client.prepare_mut(sql, arg_types)?
    } else {
        client.prepare(sql, arg_types)?
    };
    // Plans live as long as the backend: leak the handle on purpose.
    let plan: &'static OwnedPreparedStatement = Box::leak(Box::new(prepared.keep()));
    PLANS.with(|plans| plans.borrow_mut().insert(slot, plan));
    Ok(plan)
}
