//! The C library's standard streams: the device process sets its stdout line-buffered
//! (what a kernel printed before a fault reaches the plugin), and the plugin copies the
//! device's output into its own streams.

extern "C" {
    /// The C library's standard streams of this process.
    pub static stdout: *mut libc::FILE;
    pub static stderr: *mut libc::FILE;
}
