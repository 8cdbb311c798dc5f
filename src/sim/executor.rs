//! A single-threaded executor whose every choice is the seed's: the ready tasks are polled one
//! at a time, the next one drawn at random from those ready, so different seeds interleave the
//! same tasks differently and one seed always the same way.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures::future::LocalBoxFuture;

use super::rng::Rng;

pub type TaskId = u64;

struct Task {
    label: String,
    /// `None` while the task is being polled (taken out so it can spawn others).
    fut: Option<LocalBoxFuture<'static, ()>>,
    /// The last platform call it made: what a hang report says it waits on.
    waiting_on: String,
}

/// Ready task ids. Behind a mutex only because `Waker` must be `Send`; one thread uses it.
#[derive(Default)]
struct ReadySet(Mutex<BTreeSet<TaskId>>);

struct TaskWaker {
    id: TaskId,
    ready: Arc<ReadySet>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Ok(mut set) = self.ready.0.lock() {
            set.insert(self.id);
        }
    }
}

#[derive(Default)]
pub struct Executor {
    tasks: RefCell<BTreeMap<TaskId, Task>>,
    next_id: Cell<TaskId>,
    ready: Arc<ReadySet>,
    current: Cell<Option<TaskId>>,
    steps: Cell<u64>,
}

/// The step budget ran out: the tasks still ready (a task that wakes itself forever).
pub struct Spinning(pub Vec<String>);

impl Executor {
    pub fn spawn(&self, label: String, fut: LocalBoxFuture<'static, ()>) -> TaskId {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        self.tasks.borrow_mut().insert(id, Task { label, fut: Some(fut), waiting_on: String::new() });
        self.wake(id);
        id
    }

    fn wake(&self, id: TaskId) {
        if let Ok(mut set) = self.ready.0.lock() {
            set.insert(id);
        }
    }

    /// Notes what the task being polled now asked the platform for.
    pub fn note(&self, what: &str) {
        if let Some(id) = self.current.get() {
            if let Some(t) = self.tasks.borrow_mut().get_mut(&id) {
                t.waiting_on = what.to_string();
            }
        }
    }

    /// The label of the task being polled (who set a timer, who made a call).
    pub fn current_label(&self) -> String {
        let Some(id) = self.current.get() else { return "the simulator".to_string() };
        self.tasks.borrow().get(&id).map(|t| format!("task#{id} {}", t.label)).unwrap_or_default()
    }

    pub fn steps(&self) -> u64 {
        self.steps.get()
    }

    /// Polls ready tasks, one at a time in an order drawn from `rng`, until none is ready or
    /// `max_steps` polls have been made in all. `trace` gets one line per poll.
    pub fn run_ready(&self, rng: &RefCell<Rng>, max_steps: u64, trace: &mut dyn FnMut(String)) -> Result<(), Spinning> {
        loop {
            let next = {
                let Ok(mut set) = self.ready.0.lock() else { return Ok(()) };
                if set.is_empty() {
                    return Ok(());
                }
                let k = rng.borrow_mut().below(set.len() as u64) as usize;
                let id = *set.iter().nth(k).unwrap_or(&0);
                set.remove(&id);
                id
            };
            if self.steps.get() >= max_steps {
                return Err(Spinning(self.describe()));
            }
            self.steps.set(self.steps.get() + 1);
            self.poll(next, trace);
        }
    }

    fn poll(&self, id: TaskId, trace: &mut dyn FnMut(String)) {
        let (fut, label) = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(task) = tasks.get_mut(&id) else { return };
            let Some(fut) = task.fut.take() else { return };
            (fut, task.label.clone())
        };
        trace(format!("poll task#{id} {label}"));
        let mut fut = fut;
        let waker = Waker::from(Arc::new(TaskWaker { id, ready: self.ready.clone() }));
        let previous = self.current.replace(Some(id));
        let done = matches!(fut.as_mut().poll(&mut Context::from_waker(&waker)), Poll::Ready(()));
        self.current.set(previous);
        let mut tasks = self.tasks.borrow_mut();
        if done {
            tasks.remove(&id);
            trace(format!("done task#{id} {label}"));
        } else if let Some(task) = tasks.get_mut(&id) {
            task.fut = Some(fut);
        }
    }

    /// Every unfinished task and what it last asked for.
    pub fn describe(&self) -> Vec<String> {
        self.tasks
            .borrow()
            .iter()
            .map(|(id, t)| {
                if t.waiting_on.is_empty() {
                    format!("task#{id} {}", t.label)
                } else {
                    format!("task#{id} {} (last call: {})", t.label, t.waiting_on)
                }
            })
            .collect()
    }

    pub fn is_finished(&self, id: TaskId) -> bool {
        !self.tasks.borrow().contains_key(&id)
    }

    /// Drops every task (the simulator's end: tasks hold the runtime, the runtime the tasks).
    pub fn clear(&self) {
        let tasks = std::mem::take(&mut *self.tasks.borrow_mut());
        drop(tasks);
    }
}
