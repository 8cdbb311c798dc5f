//! A timer that outlives one wait. A stream reader waits for the next chunk or a time limit
//! hundreds of times per call; a fresh timer per wait would cost the runtime a callback, an
//! arming and a clearing for every one of those waits (about a tenth of a streamed call's CPU in
//! the Worker). This one keeps one runtime timer per reader and one arming at a time, re-armed
//! only when it fires: a long stream costs about one arming per time limit instead of one per
//! chunk.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};

use super::RuntimeTimer;

/// What the runtime's callback and the waiting reader share. The waker is replaced at every
/// wait, because a reader may be driven by a different task each time (a response stream's
/// every pull is one).
#[derive(Default)]
struct Shared {
    fired: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

#[derive(Default)]
pub struct Timer {
    shared: Rc<Shared>,
    /// Made on the first arming, kept for the timer's life.
    runtime: Option<Box<dyn RuntimeTimer>>,
    /// When the armed timer fires (ms since the epoch).
    armed_at: Option<u64>,
}

impl Timer {
    /// Makes the timer fire no later than `at_ms`. An armed timer that fires at or before then is
    /// kept: a wait that returns early is cheaper than a clear and a new arming per wait, and the
    /// caller re-checks its limits when it fires.
    pub fn arm_by(&mut self, at_ms: u64, now_ms: u64) {
        if self.shared.fired.replace(false) {
            self.armed_at = None;
        }
        if self.armed_at.is_some_and(|at| at <= at_ms) {
            return;
        }
        let shared = self.shared.clone();
        let timer = self.runtime.get_or_insert_with(|| {
            super::timer_of_runtime(Rc::new(move || {
                shared.fired.set(true);
                if let Some(w) = shared.waker.borrow_mut().take() {
                    w.wake();
                }
            }))
        });
        // At least 1 ms, so a clock that has not moved yet cannot spin the caller.
        timer.set(at_ms.saturating_sub(now_ms).max(1));
        self.armed_at = Some(at_ms);
    }

    /// Completes when the armed timer fires; never, when none is armed.
    pub fn fired(&self) -> impl Future<Output = ()> + Unpin + '_ {
        std::future::poll_fn(move |cx| {
            if self.shared.fired.get() {
                return Poll::Ready(());
            }
            let mut waker = self.shared.waker.borrow_mut();
            match waker.as_ref() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let (Some(t), Some(_)) = (self.runtime.as_mut(), self.armed_at) {
            if !self.shared.fired.get() {
                t.clear();
            }
        }
    }
}
