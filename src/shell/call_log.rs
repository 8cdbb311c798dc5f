//! The call log in the Worker: each finished `tools/call` becomes an entry in this isolate's
//! memory (`pure::call_log::Pending`), written to D1 in the usage flush's batch
//! (`shell::usage`): no call waits for, or causes, a storage write of its own.

use std::cell::RefCell;

use crate::pure::call_log::{Entry, Pending};

thread_local! {
    static PENDING: RefCell<Pending> = RefCell::new(Pending::default());
}

/// Adds a finished call to this isolate's log.
pub fn record(entry: Entry) {
    PENDING.with(|p| p.borrow_mut().push(entry));
}

/// Whether calls wait for the next flush.
pub fn is_empty() -> bool {
    PENDING.with(|p| p.borrow().is_empty())
}

/// Takes what waits, bounds applied (the flush writes it).
pub fn take() -> Pending {
    PENDING.with(|p| std::mem::take(&mut *p.borrow_mut())).settled()
}

/// Forgets what waits (an isolate evicted: it is lost, as in the runtime).
pub fn forget_pending() {
    PENDING.with(|p| *p.borrow_mut() = Pending::default());
}
