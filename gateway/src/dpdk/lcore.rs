use std::any::Any;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use super::eal::{Eal, EalHold};
use super::error::{DpdkError, Result};
use super::ids::LcoreId;

type Outcome<T> = Arc<Mutex<Option<std::thread::Result<T>>>>;

/// Work running on a worker lcore. `join` waits for it and reports a panic as an error.
/// Dropped without `join`, it keeps the EAL up until the process exits, since the lcore may
/// still be running.
pub struct LaunchedWork<T> {
    lcore: LcoreId,
    outcome: Outcome<T>,
    eal: Option<EalHold>,
}

struct Job {
    run: Box<dyn FnOnce() + Send>,
}

/// Runs `work` on `lcore` (`rte_eal_remote_launch`). A panic in it is caught at the lcore
/// boundary, since unwinding into DPDK's C frames is undefined behaviour.
pub fn launch<T, F>(eal: &Eal, lcore: LcoreId, work: F) -> Result<LaunchedWork<T>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    launch_watched(eal, lcore, work, |_| {})
}

/// `launch`, and `on_exit` runs on the lcore as soon as `work` has returned or panicked, with
/// the panic's message if it panicked: the way to learn of a dead worker at once rather than
/// at the next `join`. `join` still returns the outcome.
pub fn launch_watched<T, F, E>(
    eal: &Eal,
    lcore: LcoreId,
    work: F,
    on_exit: E,
) -> Result<LaunchedWork<T>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
    E: FnOnce(Option<String>) + Send + 'static,
{
    let outcome: Outcome<T> = Arc::new(Mutex::new(None));
    let slot = outcome.clone();
    let job = Box::new(Job {
        run: Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(work));
            let panic = result.as_ref().err().map(panic_message);
            *slot.lock().unwrap_or_else(|poison| poison.into_inner()) = Some(result);
            // A panic in the hook must not unwind into C either.
            let _ = catch_unwind(AssertUnwindSafe(|| on_exit(panic)));
        }),
    });
    let arg = Box::into_raw(job) as *mut c_void;
    // SAFETY: `trampoline` takes back the Box we leaked into `arg` exactly once; if the
    // launch fails the lcore never runs it and we reclaim it here.
    let ret = unsafe { dpdk_sys::rte_eal_remote_launch(Some(trampoline), arg, lcore.0) };
    if ret < 0 {
        // SAFETY: the launch failed, so the trampoline will not run; we still own the Box.
        drop(unsafe { Box::from_raw(arg as *mut Job) });
        return Err(DpdkError::from_errno("rte_eal_remote_launch", ret));
    }
    Ok(LaunchedWork {
        lcore,
        outcome,
        eal: Some(eal.hold()),
    })
}

unsafe extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the Box<Job> that `launch` leaked for this one call.
    let job = unsafe { Box::from_raw(arg as *mut Job) };
    (job.run)();
    0
}

impl<T> LaunchedWork<T> {
    pub fn lcore(&self) -> LcoreId {
        self.lcore
    }

    /// Waits for the lcore to finish. A panic in the work comes back as an error naming the
    /// lcore and the panic message.
    pub fn join(mut self) -> Result<T> {
        // SAFETY: waits on an lcore we launched; called from the main lcore.
        unsafe { dpdk_sys::rte_eal_wait_lcore(self.lcore.0) };
        // The lcore is idle again: its share of the EAL can go.
        drop(self.eal.take());
        let outcome = self
            .outcome
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        match outcome {
            Some(Ok(value)) => Ok(value),
            Some(Err(panic)) => Err(DpdkError::Invalid {
                what: "worker",
                detail: format!("{} panicked: {}", self.lcore, panic_message(&panic)),
            }),
            None => Err(DpdkError::Invalid {
                what: "worker",
                detail: format!("{} finished without a result", self.lcore),
            }),
        }
    }
}

impl<T> Drop for LaunchedWork<T> {
    fn drop(&mut self) {
        if let Some(eal) = self.eal.take() {
            eal.keep_until_exit();
        }
    }
}

fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".into()
    }
}
