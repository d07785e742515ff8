//! Futures a task polls only once something woke them. A connection's task is woken for every
//! request, and its watch (the stop signal, the idle timer) almost never has anything to say:
//! polling those on every turn took a lock shared by every connection (the stop signal's) and
//! re-registered a timer waker, for nothing. Behind a gate they are polled with a waker of
//! their own, which marks the gate open and wakes the task; the task's turn costs one load
//! while the gate stays shut.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Wake, Waker};

/// Whether the futures behind the gate were woken, and the task to wake when they are.
struct Flag {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Open first: the task, once woken, must find the gate open.
        self.woken.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

/// A gate for the futures a task polls behind it (see the module's comment).
pub struct WakeGate {
    flag: Arc<Flag>,
    /// The waker the futures behind the gate are polled with.
    waker: Waker,
    /// The task waker last handed to the flag (compared, not locked, on every turn).
    task: Option<Waker>,
}

impl WakeGate {
    /// A gate that starts open: what is behind it is polled on the first turn, which registers
    /// its waker.
    pub fn new() -> WakeGate {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        WakeGate {
            waker: Waker::from(flag.clone()),
            flag,
            task: None,
        }
    }

    /// On the task's turn: whether what is behind the gate must be polled now, with `inner()`.
    /// Shuts the gate when it says so, before those polls: a wake during them opens it again.
    pub fn passes(&mut self, cx: &Context<'_>) -> bool {
        if !self.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            let task = cx.waker().clone();
            *self
                .flag
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(task.clone());
            self.task = Some(task);
        }
        // A load, then a store only when open: a wake between the two is for something the
        // polls that follow will see.
        if !self.flag.woken.load(Ordering::Acquire) {
            return false;
        }
        self.flag.woken.store(false, Ordering::Release);
        true
    }

    /// Opens the gate: what is behind it is polled on the next turn (after it changed, say a
    /// timer moved, whatever its waker said).
    pub fn open(&self) {
        self.flag.woken.store(true, Ordering::Release);
    }

    /// The context to poll what is behind the gate with.
    pub fn inner(&self) -> Context<'_> {
        Context::from_waker(&self.waker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::AtomicUsize;
    use std::task::Poll;

    /// A task waker that counts its wakes.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn task() -> (Arc<Counter>, Waker) {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }

    #[test]
    fn a_new_gate_passes_once_then_stays_shut() {
        let (_, waker) = task();
        let cx = Context::from_waker(&waker);
        let mut gate = WakeGate::new();
        assert!(gate.passes(&cx));
        assert!(!gate.passes(&cx));
    }

    #[test]
    fn a_wake_from_behind_the_gate_opens_it_and_wakes_the_task() {
        let (counter, waker) = task();
        let cx = Context::from_waker(&waker);
        let mut gate = WakeGate::new();
        assert!(gate.passes(&cx));
        gate.inner().waker().wake_by_ref();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(gate.passes(&cx));
        assert!(!gate.passes(&cx));
    }

    #[test]
    fn a_wake_reaches_the_task_waker_of_the_latest_turn() {
        let (first, first_waker) = task();
        let (second, second_waker) = task();
        let mut gate = WakeGate::new();
        gate.passes(&Context::from_waker(&first_waker));
        gate.passes(&Context::from_waker(&second_waker));
        gate.inner().waker().wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_opened_gate_passes_without_a_wake() {
        let (counter, waker) = task();
        let cx = Context::from_waker(&waker);
        let mut gate = WakeGate::new();
        gate.passes(&cx);
        gate.open();
        assert!(gate.passes(&cx));
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_behind_the_gate_wakes_the_task_when_it_is_due() {
        let (counter, waker) = task();
        let cx = Context::from_waker(&waker);
        let mut gate = WakeGate::new();
        let mut sleep = pin!(tokio::time::sleep(std::time::Duration::from_secs(5)));
        assert!(gate.passes(&cx));
        assert!(sleep.as_mut().poll(&mut gate.inner()).is_pending());
        tokio::time::advance(std::time::Duration::from_secs(6)).await;
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(gate.passes(&cx));
        assert_eq!(sleep.as_mut().poll(&mut gate.inner()), Poll::Ready(()));
    }
}
