//! Virtual time: a clock that only moves when the simulator fires its next timer, and the
//! timers on it (the runtime's, and the simulator's own delays). Nothing reads the host's time.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::runtime::RuntimeTimer;

/// 2026-01-01T00:00:00Z: a plausible "now" for expiry checks, the same in every run.
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// A timer's place on the clock: its time, then the order it was set (ties fire in that order).
pub type TimerKey = (u64, u64);

struct Entry {
    label: String,
    fire: Rc<dyn Fn()>,
}

pub struct Clock {
    now: Cell<u64>,
    seq: Cell<u64>,
    timers: RefCell<BTreeMap<TimerKey, Entry>>,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { now: Cell::new(EPOCH_MS), seq: Cell::new(0), timers: RefCell::new(BTreeMap::new()) }
    }

    pub fn now(&self) -> u64 {
        self.now.get()
    }

    /// Calls `fire` when the clock reaches `at_ms` (at once on the next firing when it is past).
    pub fn schedule(&self, at_ms: u64, label: String, fire: Rc<dyn Fn()>) -> TimerKey {
        let seq = self.seq.get();
        self.seq.set(seq + 1);
        let key = (at_ms.max(self.now()), seq);
        self.timers.borrow_mut().insert(key, Entry { label, fire });
        key
    }

    pub fn cancel(&self, key: TimerKey) {
        self.timers.borrow_mut().remove(&key);
    }

    pub fn next_at(&self) -> Option<u64> {
        self.timers.borrow().keys().next().map(|k| k.0)
    }

    /// Moves the clock to the earliest timer and fires it; its label, or `None` with none set.
    pub fn fire_next(&self) -> Option<String> {
        let (key, entry) = self.timers.borrow_mut().pop_first()?;
        self.now.set(self.now().max(key.0));
        (entry.fire)();
        Some(entry.label)
    }

    /// Moves the clock forward with no timer due (the caller fired every earlier one).
    pub fn set_now(&self, ms: u64) {
        self.now.set(self.now().max(ms));
    }

    /// What every set timer is for, earliest first (a hang report).
    pub fn labels(&self) -> Vec<String> {
        self.timers.borrow().iter().map(|((at, _), e)| format!("{} at +{}ms", e.label, at - EPOCH_MS)).collect()
    }
}

/// `Runtime::timer`'s timer: one arming at a time on the virtual clock.
pub struct SimTimer {
    pub clock: Rc<Clock>,
    pub label: String,
    pub on_fire: Rc<dyn Fn()>,
    pub armed: Option<TimerKey>,
}

impl RuntimeTimer for SimTimer {
    fn set(&mut self, ms: u64) {
        self.clear();
        let at = self.clock.now().saturating_add(ms);
        self.armed = Some(self.clock.schedule(at, self.label.clone(), self.on_fire.clone()));
    }

    fn clear(&mut self) {
        if let Some(key) = self.armed.take() {
            self.clock.cancel(key);
        }
    }
}

impl Drop for SimTimer {
    // A dropped timer that still fired would only move the clock for nobody.
    fn drop(&mut self) {
        self.clear();
    }
}

#[derive(Default)]
struct SleepState {
    done: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

/// The simulator's own delay (latency, a chunk's delay): completes `ms` after its first poll.
pub struct Sleep {
    clock: Rc<Clock>,
    ms: u64,
    label: &'static str,
    key: Option<TimerKey>,
    state: Rc<SleepState>,
}

pub fn sleep(clock: &Rc<Clock>, ms: u64, label: &'static str) -> Sleep {
    Sleep { clock: clock.clone(), ms, label, key: None, state: Rc::default() }
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.ms == 0 || self.state.done.get() {
            return Poll::Ready(());
        }
        *self.state.borrow_waker() = Some(cx.waker().clone());
        if self.key.is_none() {
            let state = self.state.clone();
            let at = self.clock.now().saturating_add(self.ms);
            let key = self.clock.schedule(
                at,
                self.label.to_string(),
                Rc::new(move || {
                    state.done.set(true);
                    if let Some(w) = state.waker.borrow_mut().take() {
                        w.wake();
                    }
                }),
            );
            self.key = Some(key);
        }
        Poll::Pending
    }
}

impl SleepState {
    fn borrow_waker(&self) -> std::cell::RefMut<'_, Option<Waker>> {
        self.waker.borrow_mut()
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let (Some(key), false) = (self.key, self.state.done.get()) {
            self.clock.cancel(key);
        }
    }
}
