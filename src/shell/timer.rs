//! A timer that outlives one wait. A stream reader waits for the next chunk or a time limit
//! hundreds of times per call; `worker::Delay` would create a JS function, a `setTimeout` and a
//! `clearTimeout` for every one of those waits (about a tenth of a streamed call's CPU). This one
//! keeps one callback per reader and one armed `setTimeout` at a time, re-armed only when it
//! fires: a long stream costs about one timer per time limit instead of one per chunk.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::task::{Poll, Waker};

use worker::js_sys;
use worker::wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    // The handle is whatever the runtime returns (a number in Workers), passed back as is.
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &js_sys::Function, ms: f64) -> JsValue;
    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(handle: &JsValue);
}

/// What the callback and the waiting reader share. The waker is replaced at every wait, because
/// a reader may be driven by a different task each time (a response stream's every pull is one).
#[derive(Default)]
struct Shared {
    fired: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

#[derive(Default)]
pub struct Timer {
    shared: Rc<Shared>,
    /// Made on the first arming, kept for the timer's life.
    callback: Option<Closure<dyn FnMut()>>,
    /// The armed `setTimeout`, and the time (ms since the epoch) it fires at.
    armed: Option<(JsValue, u64)>,
}

impl Timer {
    /// Makes the timer fire no later than `at_ms`. An armed timer that fires at or before then is
    /// kept: a wait that returns early is cheaper than a `clearTimeout` and a new `setTimeout`
    /// per wait, and the caller re-checks its limits when it fires.
    pub fn arm_by(&mut self, at_ms: u64, now_ms: u64) {
        if self.shared.fired.replace(false) {
            self.armed = None;
        }
        if self.armed.as_ref().is_some_and(|(_, at)| *at <= at_ms) {
            return;
        }
        self.disarm();
        let shared = self.shared.clone();
        let callback = self.callback.get_or_insert_with(|| {
            Closure::new(move || {
                shared.fired.set(true);
                if let Some(w) = shared.waker.borrow_mut().take() {
                    w.wake();
                }
            })
        });
        // At least 1 ms, so a clock that has not moved yet cannot spin the caller.
        let ms = at_ms.saturating_sub(now_ms).max(1);
        let handle = set_timeout(callback.as_ref().unchecked_ref(), ms as f64);
        self.armed = Some((handle, at_ms));
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

    fn disarm(&mut self) {
        if let Some((handle, _)) = self.armed.take() {
            if !self.shared.fired.get() {
                clear_timeout(&handle);
            }
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.disarm();
    }
}
