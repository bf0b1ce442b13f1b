//! The isolated device process (`omptarget-rs-device`): it loads the device images (and
//! with them libomp and the device RTL), holds all device memory and runs the kernels,
//! in an address space where every host address faults. It answers the plugin's
//! requests one at a time ([`super::protocol`]) and ends with the plugin's process.
//!
//! Start-up, with the plugin (see [`super::address_space`] for why):
//! 1. `Hello` with its mappings; the plugin answers `Retry` (exec again: the layout
//!    overlapped the host's) or `Setup`;
//! 2. on `Setup`: map the arena at the window's base, reserve every other free range
//!    but the rest of the window and room for the stack, install the fault handlers,
//!    and answer `Ready`.

use super::address_space::{self, Mapping};
use super::arena;
use super::args::Args;
use super::doorbell::{self, Doorbell, Mapped};
use super::protocol::Range;
use super::protocol::{self, FaultRecord, Reply, Request};
use crate::backend::host_common::{dlopen, ffi_call};
use libloading::os::unix::Library;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, Ordering};

/// The device process's `main`: returns the exit status.
pub fn main() -> i32 {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match Args::parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "omptarget-rs-device: {e}\n\
                 (this program is started by the omptarget-rs x86_64 plugin with \
                 OMPTARGET_RS_ISOLATED=1; it is not run by hand)"
            );
            return 2;
        }
    };
    match serve(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("omptarget-rs-device: {e}");
            1
        }
    }
}

fn serve(args: Args) -> Result<(), String> {
    ensure_random_layout(&args)?;
    // SAFETY: the plugin passed this descriptor for us alone; it is ours from here on.
    let socket = unsafe { OwnedFd::from_raw_fd(args.socket_fd) };
    // SAFETY: as above, the arenas' memory files.
    let arena = unsafe { OwnedFd::from_raw_fd(args.arena_fd) };
    // SAFETY: as above.
    let host_arena = unsafe { OwnedFd::from_raw_fd(args.host_arena_fd) };
    // SAFETY: as above, the doorbell page's file.
    let doorbell_file = unsafe { OwnedFd::from_raw_fd(args.doorbell_fd) };
    watch_host(args.host_pid);
    let mappings = address_space::read_maps(None).map_err(|e| format!("reading maps: {e}"))?;
    let hello = Reply::Hello {
        pid: std::process::id(),
        mappings: address_space::user_ranges(&mappings),
    };
    let io = |e: std::io::Error| format!("talking to the plugin: {e}");
    protocol::send(socket.as_fd(), &hello.encode(), None).map_err(io)?;
    let Some((packet, _)) = protocol::receive(socket.as_fd()).map_err(io)? else {
        return Ok(());
    };
    let host = match Request::decode(&packet).map_err(io)? {
        Request::Retry => {
            return Err(exec_again(
                &args,
                [socket, arena, host_arena, doorbell_file],
            ))
        }
        Request::Setup { host } => host,
        other => return Err(format!("expected Setup, got {other:?}")),
    };
    let ready = set_up(&args, [&arena, &host_arena], &mappings, &host)?;
    // Line by line: what a kernel printed before it faulted reaches the plugin (the
    // fault handler cannot flush a stream).
    // SAFETY: setvbuf on this process's stdout before anything was written to it.
    unsafe {
        libc::setvbuf(
            super::c_streams::stdout,
            std::ptr::null_mut(),
            libc::_IOLBF,
            0,
        )
    };
    drop((arena, host_arena));
    let doorbell = Mapped::map(doorbell_file).map_err(|e| format!("the doorbell page: {e}"))?;
    install_fault_handlers(socket.as_fd(), &doorbell)?;
    protocol::send(socket.as_fd(), &ready.encode(), None).map_err(io)?;
    Server::default()
        .run(socket.as_fd(), doorbell.page())
        .map_err(io)
}

/// The layout must be random, so that a new exec gives a new one: a host started with
/// randomization off (gdb, `setarch -R`) passes that on to us.
fn ensure_random_layout(args: &Args) -> Result<(), String> {
    const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
    // SAFETY: personality(0xffffffff) only reads the current persona.
    let persona = unsafe { libc::personality(0xffff_ffff) };
    if persona < 0 || persona as libc::c_ulong & ADDR_NO_RANDOMIZE == 0 {
        return Ok(());
    }
    // SAFETY: sets this process's persona for its next exec; nothing else changes.
    unsafe { libc::personality(persona as libc::c_ulong & !ADDR_NO_RANDOMIZE) };
    Err(exec_self(args))
}

/// Exec this program again for a new random layout; returns only on failure.
fn exec_again(args: &Args, descriptors: [OwnedFd; 4]) -> String {
    // The descriptors survive the exec at the same numbers (not close-on-exec).
    for fd in descriptors {
        fd.into_raw_fd_keep();
    }
    let next = Args {
        attempt: args.attempt + 1,
        ..args.clone()
    };
    exec_self(&next)
}

trait KeepFd {
    fn into_raw_fd_keep(self) -> i32;
}

impl KeepFd for OwnedFd {
    /// Give up ownership without closing, and keep the descriptor across exec.
    fn into_raw_fd_keep(self) -> i32 {
        use std::os::fd::IntoRawFd;
        let fd = self.into_raw_fd();
        // SAFETY: clears FD_CLOEXEC on a descriptor we just released on purpose.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        fd
    }
}

fn exec_self(args: &Args) -> String {
    let program = CString::new("/proc/self/exe").expect("no NUL");
    let mut argv: Vec<CString> = vec![CString::new("omptarget-rs-device").expect("no NUL")];
    argv.extend(
        args.to_strings()
            .into_iter()
            .map(|a| CString::new(a).expect("no NUL")),
    );
    let mut pointers: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    // SAFETY: `program` and every argument are NUL-terminated strings alive across the
    // call, and `pointers` ends with a null pointer; execv returns only on failure.
    unsafe { libc::execv(program.as_ptr(), pointers.as_ptr()) };
    format!("exec of itself failed: {}", std::io::Error::last_os_error())
}

/// End this process when the plugin's process ends, whatever it is doing (even a kernel
/// that never returns): a thread waits on the host's pidfd. Where the kernel has no
/// pidfd, the parent-death signal does it (it fires when the thread that started us
/// ends, so it is only the fallback).
fn watch_host(host_pid: u32) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, host_pid as libc::pid_t, 0) };
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    if parent as u32 != host_pid {
        // The host ended before we could watch it.
        // SAFETY: _exit ends the process at once.
        unsafe { libc::_exit(0) };
    }
    if fd < 0 {
        // SAFETY: prctl(PR_SET_PDEATHSIG) sets this process's own death signal.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        return;
    }
    // SAFETY: a fresh descriptor owned by the thread below only.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    std::thread::Builder::new()
        .name("host-watch".into())
        .spawn(move || loop {
            let mut p = libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one descriptor we own.
            let n = unsafe { libc::poll(&mut p, 1, -1) };
            if n > 0 {
                // The host is gone: nobody will ask for anything again.
                // SAFETY: _exit ends the process at once, no destructors.
                unsafe { libc::_exit(0) };
            }
        })
        .map(drop)
        .unwrap_or_else(|e| eprintln!("omptarget-rs-device: no host watcher: {e}"));
}

/// Map the arenas, reserve everything else, and say what is left reachable.
fn set_up(
    args: &Args,
    [arena, host_arena]: [&OwnedFd; 2],
    start_mappings: &[Mapping],
    host: &[Range],
) -> Result<Reply, String> {
    let layout = args.layout();
    let device_base = layout.device_memory().0;
    arena::map_shared(arena, args.arena_size, Some(device_base))
        .map_err(|e| format!("mapping device memory at {device_base:#x}: {e}"))?;
    let host_base = layout.host_memory().0;
    arena::map_shared(host_arena, args.host_arena_size, Some(host_base))
        .map_err(|e| format!("mapping host memory at {host_base:#x}: {e}"))?;
    let stack_zone = start_mappings
        .iter()
        .find(|m| m.path == "[stack]")
        .map(|m| {
            (
                m.start.saturating_sub(address_space::stack_growth_room()),
                m.start,
            )
        });
    let mut keep_free = vec![layout.device_free()];
    keep_free.extend(stack_zone);
    let (mut reserved, failed) =
        address_space::reserve_all_gaps(&keep_free).map_err(|e| format!("reserving: {e}"))?;
    // Where a whole gap could not be reserved (an address-space limit), at least the
    // host's ranges in it are.
    for gap in failed {
        for &h in host {
            let part = (h.0.max(gap.0), h.1.min(gap.1));
            if part.0 < part.1 && address_space::reserve(part).is_ok() {
                reserved += 1;
            }
        }
    }
    let reachable = reachable_host_ranges(host).map_err(|e| format!("reading maps: {e}"))?;
    // What the host must keep free: what we had mapped before the window (and the
    // stack's room to grow).
    let mut device: Vec<Range> = address_space::user_ranges(start_mappings)
        .into_iter()
        .filter(|&r| !address_space::overlap(r, layout.window.range()))
        .collect();
    device.extend(stack_zone);
    device.sort_unstable();
    Ok(Reply::Ready {
        reachable_host_ranges: reachable,
        reserved,
        device,
    })
}

/// How many of `host` share an address with something this process can access.
fn reachable_host_ranges(host: &[Range]) -> std::io::Result<u64> {
    let maps = address_space::read_maps(None)?;
    let own: Vec<Range> = maps
        .iter()
        .filter(|m| m.accessible() && !address_space::is_vsyscall(m))
        .map(Mapping::range)
        .collect();
    Ok(address_space::count_overlapping(host, &own) as u64)
}

// ---------------------------------------------------------------------------------------
// Faults

/// The socket the fault handler reports on (-1: none yet).
static FAULT_SOCKET: AtomicI32 = AtomicI32::new(-1);
/// Set by the first fault: later ones (other threads) only wait.
static FAULTED: AtomicBool = AtomicBool::new(false);
/// The doorbell page, where the handler leaves the fault for a launch's waiter.
static DOORBELL: AtomicPtr<Doorbell> = AtomicPtr::new(std::ptr::null_mut());
/// The request being served (the number the reply carries).
static CURRENT_REQUEST: AtomicU32 = AtomicU32::new(0);

/// The signals a device access can end in.
const FAULT_SIGNALS: [i32; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

fn install_fault_handlers(socket: BorrowedFd<'_>, doorbell: &Mapped) -> Result<(), String> {
    FAULT_SOCKET.store(socket.as_raw_fd(), Ordering::SeqCst);
    DOORBELL.store(doorbell.as_ptr().cast_mut(), Ordering::SeqCst);
    install_alternate_stack()?;
    for signal in FAULT_SIGNALS {
        // SAFETY: an all-zero sigaction is valid; the handler is an extern "C" fn with
        // the SA_SIGINFO signature, and only async-signal-safe calls happen in it.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(format!(
                    "sigaction({signal}): {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    Ok(())
}

/// A stack for the handler, so a kernel that overflowed its stack is still reported.
fn install_alternate_stack() -> Result<(), String> {
    const SIZE: usize = 256 << 10;
    // SAFETY: a fresh private mapping that is never unmapped (the handler may run until
    // the process ends).
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(format!(
            "alternate signal stack: {}",
            std::io::Error::last_os_error()
        ));
    }
    let ss = libc::stack_t {
        ss_sp: stack,
        ss_flags: 0,
        ss_size: SIZE,
    };
    // SAFETY: `ss` describes the mapping above.
    if unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } != 0 {
        return Err(format!("sigaltstack: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The fault handler: report the fault once, then wait for the plugin to end us (it
/// reads our mappings to name the faulting instruction first).
extern "C" fn on_fault(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    if FAULTED.swap(true, Ordering::SeqCst) {
        loop {
            // SAFETY: pause is async-signal-safe.
            unsafe { libc::pause() };
        }
    }
    let mut record = FaultRecord {
        signal: signal as u64,
        ..FaultRecord::default()
    };
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler;
    // only plain fields are read.
    unsafe {
        if let Some(info) = info.as_ref() {
            record.code = info.si_code as u64;
            record.addr = info.si_addr() as u64;
        }
        if let Some(context) = context.cast::<libc::ucontext_t>().as_ref() {
            let regs = &context.uc_mcontext.gregs;
            record.ip = regs[libc::REG_RIP as usize] as u64;
            record.error_code = regs[libc::REG_ERR as usize] as u64;
            record.trap = regs[libc::REG_TRAPNO as usize] as u64;
            // A call to a bad address faulted on fetching it: the call pushed the
            // return address, and the stack it is on is the faulting thread's own.
            let sp = regs[libc::REG_RSP as usize] as u64;
            if record.ip == record.addr && sp != 0 && sp.is_multiple_of(8) {
                record.return_address = (sp as *const u64).read();
            }
        }
    }
    // For a launch's waiter: the record in the page, the reply rung.
    // SAFETY: the page stays mapped for the process's life (the value that maps it lives
    // in `serve` until the process ends); its fields are atomics.
    if let Some(page) = unsafe { DOORBELL.load(Ordering::SeqCst).as_ref() } {
        for (slot, w) in page.fault.iter().zip(record.words()) {
            slot.store(w, Ordering::Relaxed);
        }
        page.status.store(doorbell::STATUS_FAULT, Ordering::Relaxed);
        publish_output_ends(page);
        doorbell::ring(
            &page.reply,
            CURRENT_REQUEST.load(Ordering::SeqCst),
            &page.host_sleeping,
        );
    }
    // For a socket request's waiter: the record as a packet.
    let packet = record.encode();
    let socket = FAULT_SOCKET.load(Ordering::SeqCst);
    // SAFETY: send is async-signal-safe; `packet` is a stack buffer.
    unsafe {
        libc::send(
            socket,
            packet.as_ptr().cast(),
            packet.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    loop {
        // SAFETY: as above.
        unsafe { libc::pause() };
    }
}

// ---------------------------------------------------------------------------------------
// Requests

#[derive(Default)]
struct Server {
    modules: HashMap<u64, Library>,
    next_module: u64,
}

/// Where the device's stdout and stderr files end now, in the page (async-signal-safe:
/// two lseek calls).
fn publish_output_ends(page: &Doorbell) {
    // SAFETY: lseek on this process's standard descriptors only reads their offsets.
    let (out, err) = unsafe {
        (
            libc::lseek(1, 0, libc::SEEK_CUR),
            libc::lseek(2, 0, libc::SEEK_CUR),
        )
    };
    page.out_end.store(out.max(0) as u64, Ordering::Release);
    page.err_end.store(err.max(0) as u64, Ordering::Release);
}

impl Server {
    /// Serve requests as the doorbell announces them: a launch in the page, or a packet
    /// on the socket. The host watcher ends the process when the plugin's ends.
    fn run(mut self, socket: BorrowedFd<'_>, page: &Doorbell) -> std::io::Result<()> {
        let mut buffer = vec![0u8; protocol::MAX_PACKET];
        let mut last = 0;
        loop {
            let seen = last;
            let Some(n) = doorbell::wait_until(
                &page.request,
                |v| v != seen,
                &page.device_sleeping,
                &mut || true,
            ) else {
                return Ok(());
            };
            last = n;
            CURRENT_REQUEST.store(n, Ordering::SeqCst);
            let reply = if page.kind.load(Ordering::Relaxed) == doorbell::KIND_LAUNCH {
                let status = self.launch_from(page);
                page.status.store(status, Ordering::Relaxed);
                None
            } else {
                let Some((len, fd)) = protocol::receive_into(socket, &mut buffer)? else {
                    return Ok(());
                };
                Some(match Request::decode(&buffer[..len]) {
                    Ok(request) => self.handle(request, fd),
                    Err(e) => failed(e.to_string()),
                })
            };
            // What the kernel printed reaches the plugin (and the program's output)
            // before the answer does.
            // SAFETY: fflush(NULL) flushes every C stream of this process.
            unsafe { libc::fflush(std::ptr::null_mut()) };
            publish_output_ends(page);
            doorbell::ring(&page.reply, n, &page.host_sleeping);
            if let Some(reply) = reply {
                protocol::send(socket, &reply.encode(), None)?;
            }
        }
    }

    /// The launch the page holds.
    fn launch_from(&mut self, page: &Doorbell) -> u32 {
        let kernel = page.kernel.load(Ordering::Relaxed);
        let n = (page.nargs.load(Ordering::Relaxed) as usize).min(doorbell::PAGE_ARGS);
        let mut args = [0u64; doorbell::PAGE_ARGS];
        for (a, slot) in args.iter_mut().zip(&page.args[..n]) {
            *a = slot.load(Ordering::Relaxed);
        }
        // SAFETY: as for Request::Launch in `handle`.
        match unsafe { ffi_call::call_kernel(kernel, &args[..n]) } {
            Ok(()) => doorbell::STATUS_DONE,
            Err(_) => doorbell::STATUS_FAILED,
        }
    }

    fn handle(&mut self, request: Request, fd: Option<OwnedFd>) -> Reply {
        match request {
            Request::Load => match fd {
                Some(fd) => self.load(fd),
                None => failed("Load came without the image's file".into()),
            },
            Request::Unload { module } => match self.modules.remove(&module) {
                Some(library) => {
                    drop(library);
                    Reply::Done
                }
                None => failed(format!("no module {module}")),
            },
            Request::Symbol { module, name } => self.symbol(module, name),
            Request::Launch { kernel, args } => {
                // SAFETY: the plugin launches only kernels it resolved from images
                // loaded here, with the arguments libomptarget gave for them; a wrong
                // address faults, and the fault handler reports it.
                match unsafe { ffi_call::call_kernel(kernel, &args) } {
                    Ok(()) => Reply::Done,
                    Err(e) => failed(e.to_string()),
                }
            }
            Request::Write { addr, bytes } => {
                // SAFETY: the plugin writes only device memory of images loaded here
                // (their globals), within the global's size.
                unsafe { std::ptr::copy(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
                Reply::Done
            }
            Request::Read { addr, len } => {
                let mut bytes = vec![0u8; len as usize];
                // SAFETY: as for Write.
                unsafe { std::ptr::copy(addr as *const u8, bytes.as_mut_ptr(), bytes.len()) };
                Reply::Bytes { bytes }
            }
            Request::CheckHost { host } => match reachable_host_ranges(&host) {
                Ok(count) => Reply::Reachable { count },
                Err(e) => failed(e.to_string()),
            },
            Request::Setup { .. } | Request::Retry => failed("already set up".into()),
        }
    }

    fn load(&mut self, fd: OwnedFd) -> Reply {
        let name = dlopen::unique_image_name();
        let file = match dlopen::ImageFile::link(fd, &name) {
            Ok(Some(file)) => file,
            Ok(None) => return failed("no /proc/self/fd to open the image through".into()),
            Err(e) => return failed(e.to_string()),
        };
        match dlopen::open(&file) {
            Ok((library, load_bias)) => {
                self.next_module += 1;
                self.modules.insert(self.next_module, library);
                Reply::Loaded {
                    module: self.next_module,
                    load_bias,
                }
            }
            Err(e) => failed(e.to_string()),
        }
    }

    fn symbol(&self, module: u64, name: Vec<u8>) -> Reply {
        let Some(library) = self.modules.get(&module) else {
            return failed(format!("no module {module}"));
        };
        let Ok(name) = CString::new(name) else {
            return failed("a symbol name with a NUL".into());
        };
        match dlopen::symbol(library, &name) {
            Ok(addr) => Reply::Address { addr },
            Err(e) => Reply::Failed {
                missing: true,
                message: e.to_string(),
            },
        }
    }
}

fn failed(message: String) -> Reply {
    Reply::Failed {
        missing: false,
        message,
    }
}
