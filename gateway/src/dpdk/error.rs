use std::ffi::CStr;

/// A DPDK call failed. Carries DPDK's own explanation (rte_strerror) of the errno.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    #[error("{call} failed: {message} (errno {errno})")]
    Call {
        call: &'static str,
        errno: i32,
        message: String,
    },
    #[error("no DPDK port named {0:?}: check the device string and that its driver is loaded")]
    NoSuchPort(String),
    #[error("{what}: {detail}")]
    Invalid { what: &'static str, detail: String },
}

pub type Result<T, E = DpdkError> = std::result::Result<T, E>;

impl DpdkError {
    /// An error for `call` from a (positive) errno value.
    pub fn from_errno(call: &'static str, errno: i32) -> Self {
        let errno = errno.abs();
        // SAFETY: rte_strerror returns a pointer to a NUL-terminated string in static or
        // per-lcore storage, valid until the next call on this thread; we copy it at once.
        let message = unsafe { CStr::from_ptr(dpdk_sys::rte_strerror(errno)) }
            .to_string_lossy()
            .into_owned();
        DpdkError::Call {
            call,
            errno,
            message,
        }
    }

    /// An error for `call` from the thread's current `rte_errno`.
    pub fn last(call: &'static str) -> Self {
        // SAFETY: reads this thread's rte_errno.
        let errno = unsafe { dpdk_sys::shim_rte_errno() };
        Self::from_errno(call, errno)
    }
}

/// Turns DPDK's "negative errno on failure" convention into a Result.
pub(crate) fn check(call: &'static str, ret: i32) -> Result<i32> {
    if ret < 0 {
        Err(DpdkError::from_errno(call, ret))
    } else {
        Ok(ret)
    }
}

/// An error and its sources, each after a ": ", as anyhow's `{:#}` prints them: for the
/// library's typed errors where a log line shows the whole chain.
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}
