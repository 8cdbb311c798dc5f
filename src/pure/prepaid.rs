//! Prepaid rate-limit counts: how a busy server code's calls stop waiting for the rate-limiting
//! binding without ever getting past its limit.
//!
//! A call must be counted before its backend is asked. Instead of every call waiting for its
//! own count, an isolate that sees a second call for a key within one of the binding's windows
//! counts one call ahead, off the response path; the next call uses that count and is admitted
//! from memory at once (and counts ahead again). So each admitted call still stands for one
//! count the binding allowed; only its timing moves. The rules that keep that true:
//! - a prepaid count is used only in the window (time / period) it was asked and answered in,
//!   so it is never spent against a later window's budget (a count that crosses a window
//!   boundary in flight is dropped);
//! - at most one count is prepaid or in flight per key and isolate;
//! - a call the binding refused first waits for a count in flight and uses it if it was
//!   allowed, so a prepaid count never makes a call be refused below the limit.
//!
//! A count prepaid but never used (the burst ended) is lost for its window: at most one per key,
//! isolate and window, and only when the burst stayed below the limit anyway. Keys seen once in
//! a window never prepay, so a server called now and then costs one count per call, as before.
//! The clock comes in as an argument; the shell holds one table per isolate, with its waiters
//! (`W`: whatever wakes a waiting call).

struct Account<W> {
    key: String,
    /// The window of the last call seen, and whether that call was not the window's first.
    seen_window: u64,
    repeat: bool,
    last_seen_ms: u64,
    /// The window of a count that was allowed and no call has used yet.
    credit: Option<u64>,
    /// A count asked and not yet answered, and the calls waiting for its answer.
    in_flight: bool,
    waiters: Vec<W>,
}

/// A short list, looked through in order: an isolate has few busy server codes at a time, and a
/// list costs the Worker far less code than a map.
pub struct Prepaid<W> {
    accounts: Vec<Account<W>>,
    capacity: usize,
}

fn window(now_ms: u64, period_ms: u64) -> u64 {
    now_ms / period_ms.max(1)
}

impl<W> Prepaid<W> {
    /// At most `capacity` keys; one more forgets the one seen longest ago (with its waiters,
    /// which then wake and decide without it).
    pub fn new(capacity: usize) -> Prepaid<W> {
        Prepaid { accounts: Vec::new(), capacity: capacity.max(1) }
    }

    /// A call for `key` at `now_ms`: `true` when it used a prepaid count and is admitted with
    /// nothing to ask; `false` when it must be counted by the binding.
    pub fn take(&mut self, key: &str, now_ms: u64, period_ms: u64) -> bool {
        let w = window(now_ms, period_ms);
        match self.account(key) {
            Some(a) => {
                a.repeat = a.seen_window == w;
                a.seen_window = w;
                a.last_seen_ms = now_ms;
            }
            None => {
                if self.accounts.len() >= self.capacity {
                    let oldest = (0..self.accounts.len()).min_by_key(|&i| self.accounts[i].last_seen_ms);
                    if let Some(i) = oldest {
                        self.accounts.swap_remove(i);
                    }
                }
                let account = Account {
                    key: key.to_string(),
                    seen_window: w,
                    repeat: false,
                    last_seen_ms: now_ms,
                    credit: None,
                    in_flight: false,
                    waiters: Vec::new(),
                };
                self.accounts.push(account);
            }
        }
        self.take_credit(key, now_ms, period_ms)
    }

    /// Uses the key's prepaid count if it is one of this window's (a call that waited for one).
    pub fn take_credit(&mut self, key: &str, now_ms: u64, period_ms: u64) -> bool {
        let Some(account) = self.account(key) else { return false };
        match account.credit.take() {
            Some(w) => w == window(now_ms, period_ms),
            None => false,
        }
    }

    /// After a call for `key` was admitted: `true` when one more count should be asked now, for
    /// the key's next call (marked in flight; answer it with [`Prepaid::settle`]).
    pub fn start(&mut self, key: &str) -> bool {
        match self.account(key) {
            Some(a) if a.repeat && a.credit.is_none() && !a.in_flight => {
                a.in_flight = true;
                true
            }
            _ => false,
        }
    }

    /// A call the binding refused waits for the count in flight, if there is one: `Err` gives
    /// the waiter back when there is none to wait for.
    pub fn wait(&mut self, key: &str, waiter: W) -> Result<(), W> {
        match self.account(key) {
            Some(a) if a.in_flight => {
                a.waiters.push(waiter);
                Ok(())
            }
            _ => Err(waiter),
        }
    }

    /// The count asked at `asked_ms` answered: `Some(true)` allowed, `Some(false)` refused,
    /// `None` failed. An allowed count becomes the key's credit. Gives back the calls waiting
    /// for it, to wake.
    pub fn settle(&mut self, key: &str, asked_ms: u64, period_ms: u64, allowed: Option<bool>) -> Vec<W> {
        let Some(account) = self.account(key) else { return Vec::new() };
        account.in_flight = false;
        // Its window is the one it was asked in; `take_credit` drops it in any other (it may
        // have been counted in either when it crossed a boundary in flight).
        if allowed == Some(true) {
            account.credit = Some(window(asked_ms, period_ms));
        }
        std::mem::take(&mut account.waiters)
    }

    fn account(&mut self, key: &str) -> Option<&mut Account<W>> {
        self.accounts.iter_mut().find(|a| a.key == key)
    }

    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::test_rng::Rng;
    use std::collections::HashMap;

    const P: u64 = 60_000;

    #[test]
    fn a_key_seen_once_in_a_window_prepays_nothing() {
        let mut p: Prepaid<u32> = Prepaid::new(8);
        assert!(!p.take("k", 1_000, P));
        assert!(!p.start("k"));
        // The next window's first call neither.
        assert!(!p.take("k", 61_000, P));
        assert!(!p.start("k"));
    }

    #[test]
    fn a_second_call_prepays_and_the_third_uses_it() {
        let mut p: Prepaid<u32> = Prepaid::new(8);
        assert!(!p.take("k", 1_000, P));
        assert!(!p.start("k"));
        assert!(!p.take("k", 1_500, P));
        assert!(p.start("k"));
        // One in flight at a time.
        assert!(!p.take("k", 1_510, P));
        assert!(!p.start("k"));
        assert!(p.settle("k", 1_500, P, Some(true)).is_empty());
        assert!(p.take("k", 1_600, P));
        assert!(p.start("k"));
        // Another key has its own account.
        assert!(!p.take("other", 1_600, P));
        assert!(!p.start("other"));
    }

    #[test]
    fn a_batch_is_several_calls_at_one_instant() {
        let mut p: Prepaid<u32> = Prepaid::new(8);
        assert!(!p.take("k", 1_000, P));
        assert!(!p.take("k", 1_000, P));
        assert!(p.start("k"));
    }

    #[test]
    fn a_credit_is_spent_only_in_its_window() {
        let mut p: Prepaid<u32> = Prepaid::new(8);
        p.take("k", 59_000, P);
        p.take("k", 59_100, P);
        assert!(p.start("k"));
        p.settle("k", 59_100, P, Some(true));
        // The next window: the credit is gone, the call asks, and its window starts afresh.
        assert!(!p.take("k", 60_000, P));
        assert!(!p.start("k"));
        // A count asked in one window and answered in the next is dropped.
        p.take("k", 60_100, P);
        assert!(p.start("k"));
        p.settle("k", 119_990, P, Some(true));
        assert!(!p.take("k", 120_020, P));
    }

    #[test]
    fn refused_or_failed_counts_give_no_credit_and_wake_the_waiters() {
        let mut p: Prepaid<u32> = Prepaid::new(8);
        p.take("k", 1_000, P);
        p.take("k", 1_001, P);
        assert!(p.start("k"));
        assert_eq!(p.wait("k", 7), Ok(()));
        assert_eq!(p.wait("k", 8), Ok(()));
        assert_eq!(p.settle("k", 1_001, P, Some(false)), vec![7, 8]);
        assert!(!p.take_credit("k", 1_003, P));
        // Nothing in flight now: a waiter is given back.
        assert_eq!(p.wait("k", 9), Err(9));
        assert!(p.start("k"));
        p.settle("k", 1_003, P, None);
        assert!(!p.take_credit("k", 1_005, P));
        assert_eq!(p.wait("nobody", 1), Err(1));
    }

    #[test]
    fn bounded_forgetting_the_key_seen_longest_ago() {
        let mut p: Prepaid<u32> = Prepaid::new(2);
        p.take("a", 1, P);
        p.take("b", 2, P);
        p.take("a", 3, P);
        p.take("c", 4, P);
        assert_eq!(p.len(), 2);
        assert!(p.start("a"));
        assert!(!p.start("b"));
        // A count landing for a forgotten key is dropped.
        assert!(p.settle("b", 5, P, Some(true)).is_empty());
    }

    /// The binding as the local simulator counts: fixed windows aligned to the clock, a count
    /// allowed while the window's count is below the limit.
    struct Binding {
        limit: u64,
        period: u64,
        counts: HashMap<u64, u64>,
    }

    impl Binding {
        fn limit(&mut self, at: u64) -> bool {
            let c = self.counts.entry(at / self.period).or_default();
            if *c >= self.limit {
                return false;
            }
            *c += 1;
            true
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Event {
        /// A call reaches an isolate.
        Arrive(usize),
        /// A call's own count reaches the binding; its answer reaches the isolate.
        AskCount(usize),
        AskAnswer(usize, bool, u64),
        /// A prepaid count (asked at a time) reaches the binding; its answer reaches the isolate.
        PrepayCount(usize, u64),
        PrepayAnswer(usize, u64, bool),
        /// A call the binding refused (in a window), waiting for a count in flight, is woken.
        Wake(usize, u64),
    }

    /// Calls spread over isolates, each count in flight for a random time, against the
    /// simulator's binding, run as events in time order.
    struct Sim {
        rng: Rng,
        period: u64,
        binding: Binding,
        tables: Vec<Prepaid<(usize, u64)>>,
        queue: Vec<(u64, u64, Event)>,
        order: u64,
        /// The isolate of each call.
        calls: Vec<usize>,
        /// The window each isolate's table holds a credit for, as the model tracks it.
        credits: Vec<Option<u64>>,
        allowed: u64,
        allowed_windows: HashMap<u64, u64>,
        admitted: u64,
        /// Admitted calls by the window their count was made in.
        admitted_windows: HashMap<u64, u64>,
        /// The windows whose binding refused a call that was then refused, and those calls.
        refused: Vec<u64>,
        refused_calls: Vec<usize>,
    }

    impl Sim {
        fn at(&mut self, t: u64, e: Event) {
            self.order += 1;
            self.queue.push((t, self.order, e));
        }

        fn later(&mut self, now: u64, e: Event) {
            let t = now + self.rng.below(30);
            self.at(t, e);
        }

        fn admit(&mut self, iso: usize, now: u64, counted_window: u64) {
            self.admitted += 1;
            *self.admitted_windows.entry(counted_window).or_default() += 1;
            if self.tables[iso].start("k") {
                self.later(now, Event::PrepayCount(iso, now));
            }
        }

        /// A call the binding refused: a credit, else a wait for a count in flight, else refused.
        fn refused_by_binding(&mut self, call: usize, now: u64, refused_window: u64) {
            let iso = self.calls[call];
            if self.tables[iso].take_credit("k", now, self.period) {
                self.spend(iso, now);
                self.admit(iso, now, now / self.period);
            } else {
                self.credits[iso] = None;
                if self.tables[iso].wait("k", (call, refused_window)).is_err() {
                    self.refused.push(refused_window);
                    self.refused_calls.push(call);
                }
            }
        }

        fn spend(&mut self, iso: usize, now: u64) {
            let w = self.credits[iso].take().expect("a credit the model knows of");
            assert_eq!(w, now / self.period, "a credit spent outside its window");
        }

        fn run(&mut self) {
            while !self.queue.is_empty() {
                self.step();
            }
        }

        /// Handles the earliest event; its time.
        fn step(&mut self) -> u64 {
            let i = (0..self.queue.len()).min_by_key(|&i| (self.queue[i].0, self.queue[i].1)).unwrap();
            let (now, _, event) = self.queue.swap_remove(i);
            match event {
                Event::Arrive(iso) => {
                    let call = self.calls.len();
                    self.calls.push(iso);
                    if self.tables[iso].take("k", now, self.period) {
                        self.spend(iso, now);
                        self.admit(iso, now, now / self.period);
                    } else {
                        // A credit of an earlier window is dropped by `take`.
                        self.credits[iso] = None;
                        self.later(now, Event::AskCount(call));
                    }
                }
                Event::AskCount(call) => {
                    let ok = self.count(now);
                    self.later(now, Event::AskAnswer(call, ok, now / self.period));
                }
                Event::AskAnswer(call, true, w) => self.admit(self.calls[call], now, w),
                Event::AskAnswer(call, false, w) | Event::Wake(call, w) => self.refused_by_binding(call, now, w),
                Event::PrepayCount(iso, asked) => {
                    let ok = self.count(now);
                    self.later(now, Event::PrepayAnswer(iso, asked, ok));
                }
                Event::PrepayAnswer(iso, asked, ok) => {
                    let woken = self.tables[iso].settle("k", asked, self.period, Some(ok));
                    if ok {
                        self.credits[iso] = Some(asked / self.period);
                    }
                    for (call, w) in woken {
                        self.at(now, Event::Wake(call, w));
                    }
                }
            }
            now
        }

        fn count(&mut self, now: u64) -> bool {
            let ok = self.binding.limit(now);
            if ok {
                self.allowed += 1;
                *self.allowed_windows.entry(now / self.period).or_default() += 1;
            }
            ok
        }
    }

    /// Every admitted call stands for one count the binding allowed (a credit is spent only in
    /// its own window: `Sim::spend`); the counts no call used are at most two per isolate and
    /// window (a credit left over, a count that crossed a boundary in flight); and a call is
    /// refused only where the binding's window was full.
    #[test]
    fn never_past_the_limit_and_nearly_nothing_lost() {
        let mut prepaid_admissions = 0;
        for seed in 1..400u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let isolates = 1 + rng.below(3) as usize;
            let limit = 1 + rng.below(40);
            let mut sim = Sim {
                rng: Rng(seed),
                period: 1_000,
                binding: Binding { limit, period: 1_000, counts: HashMap::new() },
                tables: (0..isolates).map(|_| Prepaid::new(4)).collect(),
                queue: Vec::new(),
                order: 0,
                calls: Vec::new(),
                credits: vec![None; isolates],
                allowed: 0,
                allowed_windows: HashMap::new(),
                admitted: 0,
                admitted_windows: HashMap::new(),
                refused: Vec::new(),
                refused_calls: Vec::new(),
            };
            let mut t = 0;
            for _ in 0..300 {
                // Mostly a busy key, now and then a pause of up to two windows.
                t += if rng.chance(3) { rng.below(2_000) } else { rng.below(25) };
                let iso = rng.below(isolates as u64) as usize;
                sim.at(t, Event::Arrive(iso));
            }
            sim.run();
            let asked_and_allowed = sim.allowed;
            assert!(
                sim.admitted <= asked_and_allowed,
                "seed {seed}: {} admitted for {asked_and_allowed} counts",
                sim.admitted
            );
            let lost = asked_and_allowed - sim.admitted;
            let windows = sim.allowed_windows.len() as u64;
            assert!(lost <= 2 * isolates as u64 * windows, "seed {seed}: {lost} counts lost over {windows} windows");
            // Refused only where the window held the limit's worth of admitted calls, but for
            // the counts lost in it.
            for w in &sim.refused {
                let admitted = sim.admitted_windows.get(w).copied().unwrap_or(0);
                assert!(
                    admitted + 2 * isolates as u64 >= limit,
                    "seed {seed}: refused in window {w} after {admitted} of {limit}"
                );
            }
            assert_eq!(
                sim.admitted + sim.refused.len() as u64,
                sim.calls.len() as u64,
                "seed {seed}: a call never answered"
            );
            prepaid_admissions += sim.admitted;
        }
        assert!(prepaid_admissions > 0);
    }

    /// The hardening test's sequence (one client, each call sent as soon as the previous one
    /// was answered, the count it started maybe still in flight): exactly the limit admitted,
    /// then refused, whatever the counts' timing.
    #[test]
    fn one_client_gets_exactly_the_limit() {
        for seed in 1..2_000u64 {
            let limit = 1 + seed % 8;
            let mut sim = Sim {
                rng: Rng(seed),
                period: 60_000,
                binding: Binding { limit, period: 60_000, counts: HashMap::new() },
                tables: vec![Prepaid::new(4)],
                queue: Vec::new(),
                order: 0,
                calls: Vec::new(),
                credits: vec![None],
                allowed: 0,
                allowed_windows: HashMap::new(),
                admitted: 0,
                admitted_windows: HashMap::new(),
                refused: Vec::new(),
                refused_calls: Vec::new(),
            };
            let mut now = 1_000;
            for i in 0..limit + 2 {
                sim.at(now, Event::Arrive(0));
                while sim.admitted + (sim.refused.len() as u64) < i + 1 {
                    now = sim.step();
                }
            }
            sim.run();
            assert_eq!(sim.refused_calls, [limit as usize, limit as usize + 1], "seed {seed}");
            assert_eq!(sim.admitted, limit, "seed {seed}");
        }
    }
}
