//! Durable Objects: one instance per (namespace, name), made by `Worker::open_object`, each with
//! storage that outlives the instance (JSON text by key) and one alarm on the virtual clock.
//! A failed alarm is retried with exponential backoff from 2 s, up to 6 retries, as Cloudflare
//! does.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};

use super::clock::TimerKey;
use super::World;
use crate::runtime::{Env, Error, Fut, Kind, ObjectHandler, ObjectStorage, Result};

const ALARM_RETRIES: u32 = 6;
const ALARM_FIRST_BACKOFF_MS: u64 = 2_000;

/// What survives an instance: its storage and its alarm.
#[derive(Default)]
pub struct ObjectState {
    pub data: RefCell<BTreeMap<String, String>>,
    pub alarm: Cell<Option<u64>>,
    timer: Cell<Option<TimerKey>>,
    handler: RefCell<Option<Rc<dyn ObjectHandler>>>,
    /// Retries of the current alarm so far.
    retries: Cell<u32>,
}

#[derive(Default)]
pub struct Objects {
    pub states: RefCell<BTreeMap<(String, String), Rc<ObjectState>>>,
    /// Namespaces the deployment does not bind (a wrangler.toml without them).
    pub unbound: RefCell<std::collections::BTreeSet<String>>,
}

impl Objects {
    pub fn state(&self, ns: &str, name: &str) -> Rc<ObjectState> {
        self.states.borrow_mut().entry((ns.to_string(), name.to_string())).or_default().clone()
    }

    /// Drops every instance (the simulator's end: instances hold the runtime).
    pub fn clear(&self) {
        for s in self.states.borrow().values() {
            s.handler.borrow_mut().take();
        }
    }
}

/// An instance's view of its storage.
struct SimStorage {
    world: Weak<World>,
    ns: String,
    name: String,
    state: Rc<ObjectState>,
}

fn gone() -> Error {
    Error::new(Kind::Storage, "the simulator has ended")
}

impl ObjectStorage for SimStorage {
    fn get(&self, key: &str) -> Fut<'static, Result<Option<String>>> {
        let v = self.state.data.borrow().get(key).cloned();
        Box::pin(async move { Ok(v) })
    }
    fn put(&self, key: &str, json: &str) -> Fut<'static, Result<()>> {
        self.state.data.borrow_mut().insert(key.to_string(), json.to_string());
        Box::pin(async { Ok(()) })
    }
    fn delete(&self, key: &str) -> Fut<'static, Result<()>> {
        self.state.data.borrow_mut().remove(key);
        Box::pin(async { Ok(()) })
    }
    fn delete_all(&self) -> Fut<'static, Result<()>> {
        self.state.data.borrow_mut().clear();
        Box::pin(async { Ok(()) })
    }
    fn set_alarm(&self, at_ms: u64) -> Fut<'static, Result<()>> {
        let r = match self.world.upgrade() {
            Some(w) => {
                w.schedule_alarm(&self.ns, &self.name, at_ms);
                Ok(())
            }
            None => Err(gone()),
        };
        Box::pin(async move { r })
    }
    fn get_alarm(&self) -> Fut<'static, Result<Option<u64>>> {
        let v = self.state.alarm.get();
        Box::pin(async move { Ok(v) })
    }
    fn delete_alarm(&self) -> Fut<'static, Result<()>> {
        if let (Some(w), Some(key)) = (self.world.upgrade(), self.state.timer.take()) {
            w.clock.cancel(key);
        }
        self.state.alarm.set(None);
        Box::pin(async { Ok(()) })
    }
}

impl World {
    /// The live instance, made now if there is none.
    pub(super) fn instance(self: &Rc<Self>, ns: &str, name: &str) -> Result<Rc<dyn ObjectHandler>> {
        if self.objects.unbound.borrow().contains(ns) {
            return Err(Error::new(Kind::Object, format!("no Durable Object namespace is bound as {ns}")));
        }
        let state = self.objects.state(ns, name);
        if let Some(h) = state.handler.borrow().clone() {
            return Ok(h);
        }
        let storage =
            Rc::new(SimStorage { world: Rc::downgrade(self), ns: ns.into(), name: name.into(), state: state.clone() });
        let handler = self
            .worker
            .open_object(ns, storage, Env::current())
            .ok_or_else(|| Error::new(Kind::Object, format!("no Durable Object namespace is bound as {ns}")))?;
        self.trace(format!("object open {ns}/{name}"));
        *state.handler.borrow_mut() = Some(handler.clone());
        Ok(handler)
    }

    /// Drops the instance; storage and alarm stay (a restart).
    pub(super) fn restart_instance(&self, ns: &str, name: &str) {
        let state = self.objects.state(ns, name);
        if state.handler.borrow_mut().take().is_some() {
            self.trace(format!("object restart {ns}/{name}"));
        }
    }

    /// Drops the alarm (storage kept): as if it was never set, or lost with its instance.
    pub(super) fn lose_alarm(&self, ns: &str, name: &str) {
        let state = self.objects.state(ns, name);
        if let Some(key) = state.timer.take() {
            self.clock.cancel(key);
        }
        state.alarm.set(None);
        self.trace(format!("object alarm lost {ns}/{name}"));
    }

    pub(super) fn schedule_alarm(self: &Rc<Self>, ns: &str, name: &str, at_ms: u64) {
        let state = self.objects.state(ns, name);
        if let Some(key) = state.timer.take() {
            self.clock.cancel(key);
        }
        state.alarm.set(Some(at_ms));
        let weak = Rc::downgrade(self);
        let (n, m) = (ns.to_string(), name.to_string());
        let key = self.clock.schedule(
            at_ms,
            format!("alarm of {ns}/{name}"),
            Rc::new(move || {
                if let Some(w) = weak.upgrade() {
                    let label = format!("alarm of {n}/{m}");
                    let fut = run_alarm(w.clone(), n.clone(), m.clone());
                    w.exec.spawn(label, Box::pin(fut));
                }
            }),
        );
        state.timer.set(Some(key));
    }
}

async fn run_alarm(w: Rc<World>, ns: String, name: String) {
    let state = w.objects.state(&ns, &name);
    // While the handler runs the alarm is no longer set; one it sets is a new alarm.
    state.timer.set(None);
    state.alarm.set(None);
    w.trace(format!("alarm fires {ns}/{name}"));
    let result = match w.instance(&ns, &name) {
        Ok(h) => h.alarm().await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => state.retries.set(0),
        Err(e) => {
            let n = state.retries.get();
            w.trace(format!("alarm failed {ns}/{name}: {e}"));
            if state.alarm.get().is_none() && n < ALARM_RETRIES {
                state.retries.set(n + 1);
                let at = w.clock.now() + (ALARM_FIRST_BACKOFF_MS << n);
                w.schedule_alarm(&ns, &name, at);
            } else {
                state.retries.set(0);
            }
        }
    }
}
