//! The plugin's side of the isolated device process: starting it (and keeping the two
//! address spaces apart, [`super::address_space`]), one request at a time (launches
//! through the shared [`super::doorbell`] page, the rest through the socket), what it
//! prints passed on to the program's own output, and its end.

use super::address_space::{self, Layout, Window};
use super::arena::Arena;
use super::args::Args;
use super::c_streams;
use super::doorbell::{self, Mapped};
use super::fault::signal_name;
use super::protocol::Range;
use super::protocol::{self, FaultRecord, Reply, Request};
use crate::backend::BackendError;
use crate::support::diag;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// The device process's file name, installed in the install's libexec folder (or beside
/// the plugin).
pub use install_layout::DEVICE_EXECUTABLE;
/// Where to find it instead (tests, unusual installs).
pub const DEVICE_EXECUTABLE_ENV: &str = "OMPTARGET_RS_DEVICE_EXE";
/// How often the device process may exec itself for a layout that does not overlap the
/// host's before it goes on with what it has (and the debug log says so).
const MAX_LAYOUT_ATTEMPTS: u32 = 16;

/// A started device process.
pub struct DeviceProcess {
    pid: u32,
    channel: Mutex<Channel>,
}

struct Channel {
    socket: OwnedFd,
    doorbell: Mapped,
    /// The last request's number (the doorbell's counters).
    last_request: u32,
    /// The device's stdout and stderr: memory files it writes, this process reads.
    output: [Output; 2],
    /// Why the process is gone, once it is.
    ended: Option<String>,
    /// Its wait status, once reaped.
    status: Option<i32>,
    receive_buffer: Vec<u8>,
}

/// One of the device process's output files, and how far this process has passed it on.
struct Output {
    file: std::fs::File,
    passed_on: u64,
    stream: Stream,
}

/// How a launch ended.
pub enum LaunchOutcome {
    Done,
    Fault(FaultRecord),
    Failed(String),
}

/// Where the device executable is: `$OMPTARGET_RS_DEVICE_EXE`, else beside the plugin
/// file or in `../libexec/omptarget-indirect/` from it.
pub fn find_executable() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(DEVICE_EXECUTABLE_ENV) {
        return Ok(PathBuf::from(path));
    }
    let plugin =
        crate::support::own_file::path().ok_or("cannot tell where the plugin file is (dladdr)")?;
    let dir = plugin.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join(DEVICE_EXECUTABLE),
        dir.join("..")
            .join(install_layout::LIBEXEC_DIR)
            .join(DEVICE_EXECUTABLE),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "no {DEVICE_EXECUTABLE} beside the plugin ({} or {}; `cargo xtask install` \
                 puts it there, or set {DEVICE_EXECUTABLE_ENV})",
                candidates[0].display(),
                candidates[1].display()
            )
        })
}

/// A descriptor duplicated to a number >= 10 (close-on-exec), so that moving the
/// device's descriptors to 3, 4 and 5 in the child never overwrites one with another.
fn high_duplicate(fd: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor (or -1) owned right below.
    let raw = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn start_err(what: impl std::fmt::Display) -> BackendError {
    BackendError::DeviceProcess(format!("starting the isolated device process: {what}"))
}

impl DeviceProcess {
    /// Start the device process inside `layout`'s window, with `device_memory` and
    /// `host_memory` where the layout puts them.
    pub(crate) fn start(
        layout: Layout,
        device_memory: &Arena,
        host_memory: &Arena,
    ) -> Result<DeviceProcess, BackendError> {
        let window = layout.window;
        let exe = find_executable().map_err(start_err)?;
        let (ours, theirs) = protocol::socket_pair().map_err(start_err)?;
        let doorbell = Mapped::create().map_err(start_err)?;
        let stdout_file = output_file(c"omptarget-rs-device-stdout").map_err(start_err)?;
        let stderr_file = output_file(c"omptarget-rs-device-stderr").map_err(start_err)?;
        let passed = [
            high_duplicate(theirs.as_fd()),
            high_duplicate(device_memory.file().as_fd()),
            high_duplicate(host_memory.file().as_fd()),
            high_duplicate(doorbell.file().as_fd()),
        ]
        .into_iter()
        .collect::<std::io::Result<Vec<OwnedFd>>>()
        .map_err(start_err)?;
        let args = Args {
            socket_fd: 3,
            arena_fd: 4,
            arena_size: device_memory.size(),
            host_arena_fd: 5,
            host_arena_size: host_memory.size(),
            doorbell_fd: 6,
            window,
            host_pid: std::process::id(),
            attempt: 0,
        };
        let moves: Vec<(i32, i32)> = passed
            .iter()
            .zip(3..)
            .map(|(fd, to)| (fd.as_raw_fd(), to))
            .collect();
        let mut command = Command::new(&exe);
        command
            .args(args.to_strings())
            // The device process must not start a device process of its own (libomptarget,
            // which the images load, loads this plugin there too) nor mark our marker.
            .env_remove(super::args::ISOLATED_ENV)
            .env_remove(diag::LOAD_MARKER_ENV)
            .stdin(Stdio::null())
            // Files, not pipes: a kernel that prints more than a pipe holds never waits
            // for us; we pass on what it wrote after each request.
            .stdout(Stdio::from(stdout_file.try_clone().map_err(start_err)?))
            .stderr(Stdio::from(stderr_file.try_clone().map_err(start_err)?));
        // SAFETY: the closure runs in the forked child before exec and only makes
        // async-signal-safe system calls (dup2 clears close-on-exec on the copies).
        unsafe {
            command.pre_exec(move || {
                for &(from, to) in &moves {
                    if libc::dup2(from, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|e| start_err(format!("{}: {e}", exe.display())))?;
        drop((theirs, passed));
        let pid = child.id();
        // The child is reaped by `end` or a failed wait (or, once this process is gone,
        // by init).
        drop(child);
        let output = |file, stream| Output {
            file,
            passed_on: 0,
            stream,
        };
        let process = DeviceProcess {
            pid,
            channel: Mutex::new(Channel {
                socket: ours,
                doorbell,
                last_request: 0,
                output: [
                    output(stdout_file, Stream::Out),
                    output(stderr_file, Stream::Err),
                ],
                ended: None,
                status: None,
                receive_buffer: vec![0; protocol::MAX_PACKET],
            }),
        };
        match process.handshake(window) {
            Ok(()) => Ok(process),
            Err(e) => {
                process.end(&format!("its start failed: {e}"));
                Err(e)
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Hello/Retry/Setup/Ready (see the server); the host then keeps the device's own
    /// ranges free. The debug log says what the start-up check found.
    fn handshake(&self, window: Window) -> Result<(), BackendError> {
        let mut retries = 0;
        loop {
            let hello = self.receive_reply().map_err(start_err)?;
            let Reply::Hello { pid, mappings } = hello else {
                return Err(start_err(format!("expected Hello, got {hello:?}")));
            };
            let host_maps = address_space::read_maps(None).map_err(start_err)?;
            // Every host range, reservations included, must stay clear of the device's
            // layout; the device is told the ones an access could reach.
            let mut taken: Vec<Range> = address_space::user_ranges(&host_maps)
                .into_iter()
                .filter(|&r| !address_space::overlap(r, window.range()))
                .collect();
            let host = host_data_ranges(&host_maps, window);
            taken.push(window.range());
            taken.sort_unstable();
            let overlapping = address_space::count_overlapping(&mappings, &taken);
            if overlapping > 0 && retries < MAX_LAYOUT_ATTEMPTS {
                diag::debug(|| {
                    let first: Vec<_> = mappings
                        .iter()
                        .filter(|&&m| taken.iter().any(|&t| address_space::overlap(m, t)))
                        .take(3)
                        .collect();

                    format!(
                        "isolated device: process {pid}'s layout overlaps {overlapping} host \
                         range(s) (first {first:x?}): a new one"
                    )
                });
                retries += 1;
                self.send(&Request::Retry, None).map_err(start_err)?;
                continue;
            }
            let host_ranges = host.len();
            self.send(&Request::Setup { host }, None)
                .map_err(start_err)?;
            let ready = self.receive_reply().map_err(start_err)?;
            let Reply::Ready {
                reachable_host_ranges,
                reserved,
                device,
            } = ready
            else {
                return Err(start_err(format!("{ready:?}")));
            };
            let host_could_not_reserve = reserve_device_ranges(&device);
            diag::debug(|| {
                format!(
                    "isolated device: process {pid} (executable layouts refused: {retries}); \
                     {reachable_host_ranges} of the host's {host_ranges} mapped ranges could \
                     not be reserved inaccessible there; it reserved {reserved} ranges, and \
                     the host keeps its {} start-up ranges free ({host_could_not_reserve} \
                     could not be)",
                    device.len()
                )
            });
            return Ok(());
        }
    }

    /// Send a request through the socket and wait for its answer (also through the
    /// socket), passing on what the device printed meanwhile.
    pub fn request(
        &self,
        request: &Request,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Reply, BackendError> {
        let mut channel = crate::support::locking::lock(&self.channel);
        channel.check_running()?;
        let answer = protocol::send(channel.socket.as_fd(), &request.encode(), fd).and_then(|()| {
            channel.ring(doorbell::KIND_SOCKET);
            channel.receive()
        });
        channel.forward_output();
        match answer {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) | Err(_) => {
                let why = match answer {
                    Err(e) => format!("talking to it failed: {e}"),
                    _ => channel.exit_status(self.pid),
                };
                channel.ended = Some(why.clone());
                Err(ended(&why))
            }
        }
    }

    /// Run `kernel(args...)` on the device: through the doorbell page, or the socket for
    /// more arguments than the page holds.
    pub fn launch(&self, kernel: u64, args: &[u64]) -> Result<LaunchOutcome, BackendError> {
        if args.len() > doorbell::PAGE_ARGS {
            let request = Request::Launch {
                kernel,
                args: args.to_vec(),
            };
            return Ok(match self.request(&request, None)? {
                Reply::Done => LaunchOutcome::Done,
                Reply::Fault(record) => LaunchOutcome::Fault(record),
                Reply::Failed { message, .. } => LaunchOutcome::Failed(message),
                other => LaunchOutcome::Failed(format!("unexpected answer {other:?}")),
            });
        }
        let mut channel = crate::support::locking::lock(&self.channel);
        channel.check_running()?;
        let page = channel.doorbell.page();
        page.kernel.store(kernel, Ordering::Relaxed);
        page.nargs.store(args.len() as u64, Ordering::Relaxed);
        for (slot, &a) in page.args.iter().zip(args) {
            slot.store(a, Ordering::Relaxed);
        }
        let n = channel.ring(doorbell::KIND_LAUNCH);
        let pid = self.pid;
        let mut status = None;
        let page = channel.doorbell.page();
        let answered =
            doorbell::wait_until(&page.reply, |v| v == n, &page.host_sleeping, &mut || {
                still_running(pid, &mut status)
            });
        channel.forward_output();
        if answered.is_none() {
            channel.status = status;
            let why = channel.exit_status(pid);
            channel.ended = Some(why.clone());
            return Err(ended(&why));
        }
        let page = channel.doorbell.page();
        Ok(match page.status.load(Ordering::Acquire) {
            doorbell::STATUS_DONE => LaunchOutcome::Done,
            doorbell::STATUS_FAULT => {
                let mut words = [0u64; FaultRecord::WORDS];
                for (w, f) in words.iter_mut().zip(&page.fault) {
                    *w = f.load(Ordering::Relaxed);
                }
                LaunchOutcome::Fault(FaultRecord::from_words(words))
            }
            _ => LaunchOutcome::Failed("the device process could not call the kernel".into()),
        })
    }

    fn send(&self, request: &Request, fd: Option<BorrowedFd<'_>>) -> std::io::Result<()> {
        let channel = crate::support::locking::lock(&self.channel);
        protocol::send(channel.socket.as_fd(), &request.encode(), fd)
    }

    /// A reply of the start-up, before the doorbell is in use.
    fn receive_reply(&self) -> std::io::Result<Reply> {
        let mut channel = crate::support::locking::lock(&self.channel);
        let reply = channel.receive();
        channel.forward_output();
        match reply? {
            Some(reply) => Ok(reply),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                channel.exit_status(self.pid),
            )),
        }
    }

    /// Whether the process has ended (after a fault, say).
    pub fn ended(&self) -> bool {
        crate::support::locking::lock(&self.channel).ended.is_some()
    }

    /// End the process now (SIGKILL) and reap it; later requests fail with `why`.
    pub fn end(&self, why: &str) {
        let mut channel = crate::support::locking::lock(&self.channel);
        channel.forward_output();
        if channel.ended.is_none() {
            channel.ended = Some(why.to_owned());
        }
        if channel.status.is_none() {
            let mut status = 0;
            // SAFETY: kill and waitpid on our own child's pid, not yet reaped.
            unsafe {
                libc::kill(self.pid as libc::pid_t, libc::SIGKILL);
                libc::waitpid(self.pid as libc::pid_t, &mut status, 0);
            }
            channel.status = Some(status);
        }
    }

    /// The device process's mappings (for naming a faulting instruction).
    pub fn maps(&self) -> std::io::Result<Vec<address_space::Mapping>> {
        address_space::read_maps(Some(self.pid))
    }
}

fn ended(why: &str) -> BackendError {
    BackendError::DeviceProcess(format!("the isolated device process has ended: {why}"))
}

/// The ranges of this process (`host_maps`) that hold something a device access could
/// reach: every accessible mapping outside the device window (reservations, ours or the
/// C library's guard pages, hold nothing).
pub(crate) fn host_data_ranges(host_maps: &[address_space::Mapping], window: Window) -> Vec<Range> {
    host_maps
        .iter()
        .filter(|m| {
            m.accessible()
                && !address_space::is_vsyscall(m)
                && !address_space::overlap(m.range(), window.range())
        })
        .map(address_space::Mapping::range)
        .collect()
}

/// Keep the device's start-up ranges free in this process: how many could not be
/// (something of ours is mapped there already).
fn reserve_device_ranges(device: &[Range]) -> usize {
    device
        .iter()
        .filter(|&&r| address_space::reserve(r).is_err())
        .count()
}

/// Whether process `pid` still runs; once it has ended, its reaped wait status goes into
/// `status`.
fn still_running(pid: u32, status: &mut Option<i32>) -> bool {
    let mut st = 0;
    // SAFETY: waitpid with WNOHANG on our own child.
    let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut st, libc::WNOHANG) };
    if rc == pid as libc::pid_t {
        *status = Some(st);
        return false;
    }
    rc == 0
}

impl Channel {
    fn check_running(&self) -> Result<(), BackendError> {
        match &self.ended {
            Some(why) => Err(ended(why)),
            None => Ok(()),
        }
    }

    /// Ring the doorbell for the next request, of `kind`; its number.
    fn ring(&mut self, kind: u32) -> u32 {
        self.last_request = self.last_request.wrapping_add(1);
        let page = self.doorbell.page();
        page.kind.store(kind, Ordering::Relaxed);
        doorbell::ring(&page.request, self.last_request, &page.device_sleeping);
        self.last_request
    }

    /// The next packet on the socket (None: the process closed its end).
    fn receive(&mut self) -> std::io::Result<Option<Reply>> {
        let Some((len, _)) = protocol::receive_into(self.socket.as_fd(), &mut self.receive_buffer)?
        else {
            return Ok(None);
        };
        Reply::decode(&self.receive_buffer[..len]).map(Some)
    }

    /// Pass on what the device process printed since last time, into this process's own
    /// C streams (so it lands in order with the program's own output, as a GPU's printf
    /// does). The doorbell page says how far each file reaches.
    fn forward_output(&mut self) {
        let page = self.doorbell.page();
        let ends = [
            page.out_end.load(Ordering::Acquire),
            page.err_end.load(Ordering::Acquire),
        ];
        for (output, end) in self.output.iter_mut().zip(ends) {
            output.pass_on(end);
        }
    }

    /// How the process ended (reaping it if that was not done yet).
    fn exit_status(&mut self, pid: u32) -> String {
        let status = match self.status {
            Some(s) => s,
            None => {
                let mut st = 0;
                // SAFETY: waitpid on our own child's pid.
                let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut st, 0) };
                if rc != pid as libc::pid_t {
                    return "the device process is gone".into();
                }
                self.status = Some(st);
                st
            }
        };
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            format!(
                "the device process was killed by signal {signal}{} without a report (a \
                 kernel that overflowed its stack, or the system ended it)",
                signal_name(signal as u64).map_or(String::new(), |n| format!(" ({n})"))
            )
        } else {
            format!(
                "the device process exited with status {}",
                libc::WEXITSTATUS(status)
            )
        }
    }
}

impl Output {
    /// Copy `[passed_on, end)` of the file into this process's C stream.
    fn pass_on(&mut self, end: u64) {
        let mut buf = [0u8; 16 << 10];
        while self.passed_on < end {
            let want = ((end - self.passed_on) as usize).min(buf.len());
            match self.file.read_at(&mut buf[..want], self.passed_on) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // SAFETY: the C streams are the process's own, valid for its life;
                    // fwrite copies `n` bytes out of our buffer.
                    unsafe {
                        let file = match self.stream {
                            Stream::Out => c_streams::stdout,
                            Stream::Err => c_streams::stderr,
                        };
                        libc::fwrite(buf.as_ptr().cast(), 1, n, file);
                    }
                    self.passed_on += n as u64;
                }
            }
        }
    }
}

/// A memory file for one of the device process's output streams.
fn output_file(name: &std::ffi::CStr) -> std::io::Result<std::fs::File> {
    // SAFETY: memfd_create returns a fresh descriptor (or -1), owned below.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh and ours only.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) }))
}

#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}
