//! CPU time, for the summary's CPU column: on 2 cores the wall clock follows the CPU
//! work of both lanes, so this column says where a shorter run must come from.

/// User and system seconds of this process and of the children it has waited for.
pub fn seconds() -> f64 {
    usage(libc::RUSAGE_SELF) + usage(libc::RUSAGE_CHILDREN)
}

fn usage(who: libc::c_int) -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable rusage, and `who` is one of the two values
    // getrusage accepts; it fills the struct or fails without writing.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: zeroed is a valid rusage (plain integers), and getrusage succeeded.
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}
