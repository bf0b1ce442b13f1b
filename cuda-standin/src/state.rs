//! The driver's state, one per process behind a mutex: whether cuInit ran, the primary
//! contexts (retained and released with counts; one released to 0 is invalid, and its
//! modules, streams, events and peer access go with it; its flags stay), the memory
//! registry, the loaded modules and their kernels, streams and events. Each thread's
//! current context is thread-local, as in the driver.
//!
//! Handles are values from counters (a context's is fixed per device), each kind in a
//! range of its own, and always looked up, never dereferenced: an unknown one is
//! CUDA_ERROR_INVALID_HANDLE. A kernel's handle is the address of its record.

use crate::device::Config;
use crate::errors::{Failure, Outcome, CUDA_ERROR_NOT_INITIALIZED};
use crate::memory::Memory;
use crate::module::Module;
use serde_json::json;
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

const CONTEXT_BASE: u64 = 0xc0_0000_0000;
const MODULE_BASE: u64 = 0x30_0000_0000;
const STREAM_BASE: u64 = 0x50_0000_0000;
const EVENT_BASE: u64 = 0xe0_0000_0000;
/// The legacy default stream (null) and the two special stream handles.
const CU_STREAM_LEGACY: u64 = 0x1;
const CU_STREAM_PER_THREAD: u64 = 0x2;

/// CU_LIMIT_* values and defaults (an H100's).
pub const LIMIT_STACK_SIZE: u32 = 0;
pub const LIMIT_PRINTF_FIFO_SIZE: u32 = 1;
pub const LIMIT_MALLOC_HEAP_SIZE: u32 = 2;
/// The highest CU_LIMIT_* value accepted (CUDA 13 defines 0..=10).
const LAST_LIMIT: u32 = 10;

/// The limit's name in the report.
pub fn limit_name(limit: u32) -> String {
    match limit {
        LIMIT_STACK_SIZE => "CU_LIMIT_STACK_SIZE".into(),
        LIMIT_PRINTF_FIFO_SIZE => "CU_LIMIT_PRINTF_FIFO_SIZE".into(),
        LIMIT_MALLOC_HEAP_SIZE => "CU_LIMIT_MALLOC_HEAP_SIZE".into(),
        other => format!("CUlimit {other}"),
    }
}

fn limit_default(limit: u32) -> usize {
    match limit {
        LIMIT_STACK_SIZE => 1024,
        LIMIT_PRINTF_FIFO_SIZE => 1 << 20,
        LIMIT_MALLOC_HEAP_SIZE => 8 << 20,
        _ => 0,
    }
}

/// A device's primary context.
pub struct Context {
    pub handle: u64,
    pub device: usize,
    pub retains: u32,
    limits: HashMap<u32, usize>,
    /// The primary context's flags (cuDevicePrimaryCtxSetFlags; 0 until set); they
    /// stay when it is released to 0.
    pub flags: u32,
    /// The contexts this one may access (cuCtxEnablePeerAccess); emptied, and this one
    /// taken out of every other's, when it is released to 0.
    pub peers: BTreeSet<u64>,
}

impl Context {
    pub fn limit(&self, limit: u32) -> usize {
        self.limits
            .get(&limit)
            .copied()
            .unwrap_or_else(|| limit_default(limit))
    }
}

/// A kernel (or device function) handed out by cuModuleGetFunction; its handle is this
/// record's address.
pub struct Kernel {
    pub module: u64,
    pub name: String,
    pub entry: bool,
    pub static_shared: u64,
    /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as last set.
    pub max_dynamic_shared: i32,
}

/// A module loaded in a context.
pub struct LoadedModule {
    pub context: u64,
    pub sm: u32,
    pub module: Module,
    /// Kernels handed out, by name (boxed: their addresses are their handles).
    pub kernels: HashMap<String, Box<Kernel>>,
}

pub struct State {
    pub config: Config,
    pub initialized: bool,
    pub contexts: Vec<Context>,
    pub memory: Memory,
    pub modules: BTreeMap<u64, LoadedModule>,
    /// Kernel handle -> (module, name).
    pub functions: HashMap<u64, (u64, String)>,
    /// Stream handle -> context.
    pub streams: HashMap<u64, u64>,
    /// Event handle -> context.
    pub events: HashMap<u64, u64>,
    next_handle: u64,
}

thread_local! {
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

fn global() -> MutexGuard<'static, Option<State>> {
    static STATE: Mutex<Option<State>> = Mutex::new(None);
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `f` on the state (made at first use from the environment).
pub fn with_state<T>(f: impl FnOnce(&mut State) -> Outcome<T>) -> Outcome<T> {
    let mut guard = global();
    let state = guard.get_or_insert_with(|| State::new(Config::from_env()));
    f(state)
}

/// Run `f` on the state after cuInit; CUDA_ERROR_NOT_INITIALIZED before.
pub fn with_initialized<T>(f: impl FnOnce(&mut State) -> Outcome<T>) -> Outcome<T> {
    with_state(|s| {
        if !s.initialized {
            return Err(Failure::new(
                CUDA_ERROR_NOT_INITIALIZED,
                "cuInit has not been called",
            ));
        }
        f(s)
    })
}

/// The tests that call the exported functions share this process's state and counters
/// (contexts, allocations, the copy count): they run one at a time, holding this.
#[cfg(test)]
pub fn exclusive() -> MutexGuard<'static, ()> {
    static TESTS: Mutex<()> = Mutex::new(());
    TESTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// This thread's current context handle (0: none).
pub fn current_handle() -> u64 {
    CURRENT.with(Cell::get)
}

pub fn set_current_handle(handle: u64) {
    CURRENT.with(|c| c.set(handle));
}

impl State {
    pub(crate) fn new(config: Config) -> State {
        let contexts = (0..config.devices)
            .map(|device| Context {
                handle: CONTEXT_BASE + 0x100 * (device as u64 + 1),
                device,
                retains: 0,
                limits: HashMap::new(),
                flags: 0,
                peers: BTreeSet::new(),
            })
            .collect();
        State {
            config,
            initialized: false,
            contexts,
            memory: Memory::default(),
            modules: BTreeMap::new(),
            functions: HashMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            next_handle: 0,
        }
    }

    fn new_handle(&mut self, base: u64) -> u64 {
        self.next_handle += 1;
        base + 0x10 * self.next_handle
    }

    /// A live (retained) context by handle.
    pub fn context(&self, handle: u64) -> Outcome<&Context> {
        match self.contexts.iter().find(|c| c.handle == handle) {
            Some(c) if c.retains > 0 => Ok(c),
            Some(c) => Err(Failure::invalid_context(format!(
                "context {handle:#x} of device {} was released",
                c.device
            ))),
            None => Err(Failure::invalid_context(format!(
                "{handle:#x} is not a context"
            ))),
        }
    }

    fn context_mut(&mut self, handle: u64) -> Outcome<&mut Context> {
        self.context(handle)?;
        Ok(self
            .contexts
            .iter_mut()
            .find(|c| c.handle == handle)
            .expect("checked above"))
    }

    /// This thread's current context, which must be live.
    pub fn current(&self) -> Outcome<&Context> {
        match current_handle() {
            0 => Err(Failure::invalid_context(
                "no context is current on this thread",
            )),
            handle => self.context(handle),
        }
    }

    /// cuDevicePrimaryCtxRetain.
    pub fn retain(&mut self, device: i32) -> Outcome<u64> {
        let device = self.config.check(device)?;
        let context = &mut self.contexts[device];
        context.retains += 1;
        crate::log::event(
            "context_retain",
            json!({"device": device, "context": context.handle, "retains": context.retains}),
        );
        Ok(context.handle)
    }

    /// cuDevicePrimaryCtxRelease: the last release invalidates the context and drops
    /// what lived in it.
    pub fn release(&mut self, device: i32) -> Outcome {
        let device = self.config.check(device)?;
        let context = &mut self.contexts[device];
        if context.retains == 0 {
            return Err(Failure::invalid_context(format!(
                "device {device}'s primary context is not retained"
            )));
        }
        context.retains -= 1;
        if context.retains == 0 {
            let handle = context.handle;
            context.limits.clear();
            context.peers.clear();
            for other in &mut self.contexts {
                other.peers.remove(&handle);
            }
            self.drop_context_contents(handle);
        }
        Ok(())
    }

    fn drop_context_contents(&mut self, context: u64) {
        let modules: Vec<u64> = self
            .modules
            .iter()
            .filter(|(_, m)| m.context == context)
            .map(|(&id, _)| id)
            .collect();
        for id in modules {
            self.unload_module_now(id, "its context was released");
        }
        self.streams.retain(|_, c| *c != context);
        self.events.retain(|_, c| *c != context);
    }

    /// cuCtxSetLimit on the current context.
    pub fn set_limit(&mut self, limit: u32, value: usize) -> Outcome {
        check_limit(limit)?;
        let handle = self.current()?.handle;
        self.context_mut(handle)?.limits.insert(limit, value);
        crate::log::event(
            "set_limit",
            json!({"context": handle, "limit": limit, "name": limit_name(limit), "value": value}),
        );
        Ok(())
    }

    /// cuCtxGetLimit on the current context.
    pub fn get_limit(&self, limit: u32) -> Outcome<usize> {
        check_limit(limit)?;
        Ok(self.current()?.limit(limit))
    }

    /// cuStreamCreate in the current context.
    pub fn create_stream(&mut self, flags: u32) -> Outcome<u64> {
        let context = self.current()?.handle;
        let stream = self.new_handle(STREAM_BASE);
        self.streams.insert(stream, context);
        crate::log::event(
            "stream_create",
            json!({"stream": stream, "flags": flags, "context": context}),
        );
        Ok(stream)
    }

    /// A stream a call may use: the legacy default stream (null), the special handles,
    /// or a live stream.
    pub fn check_stream(&self, stream: u64) -> Outcome {
        if matches!(stream, 0 | CU_STREAM_LEGACY | CU_STREAM_PER_THREAD)
            || self.streams.contains_key(&stream)
        {
            return Ok(());
        }
        Err(Failure::invalid_handle(format!(
            "{stream:#x} is not a live stream"
        )))
    }

    pub fn destroy_stream(&mut self, stream: u64) -> Outcome {
        self.streams
            .remove(&stream)
            .map(drop)
            .ok_or_else(|| Failure::invalid_handle(format!("{stream:#x} is not a live stream")))
    }

    /// cuEventCreate in the current context.
    pub fn create_event(&mut self) -> Outcome<u64> {
        let context = self.current()?.handle;
        let event = self.new_handle(EVENT_BASE);
        self.events.insert(event, context);
        Ok(event)
    }

    pub fn check_event(&self, event: u64) -> Outcome {
        if self.events.contains_key(&event) {
            return Ok(());
        }
        Err(Failure::invalid_handle(format!(
            "{event:#x} is not a live event"
        )))
    }

    pub fn destroy_event(&mut self, event: u64) -> Outcome {
        self.check_event(event)?;
        self.events.remove(&event);
        Ok(())
    }

    pub fn new_module_id(&mut self) -> u64 {
        self.new_handle(MODULE_BASE)
    }
}

fn check_limit(limit: u32) -> Outcome {
    if limit > LAST_LIMIT {
        return Err(Failure::invalid_value(format!("limit {limit}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_numbers_are_the_driver_apis() {
        use cudarc::driver::sys::CUlimit;
        assert_eq!(LIMIT_STACK_SIZE, CUlimit::CU_LIMIT_STACK_SIZE as u32);
        assert_eq!(
            LIMIT_PRINTF_FIFO_SIZE,
            CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE as u32
        );
        assert_eq!(
            LIMIT_MALLOC_HEAP_SIZE,
            CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE as u32
        );
    }

    #[test]
    fn a_released_context_is_invalid_and_comes_back_when_retained() {
        let mut s = State::new(Config {
            devices: 2,
            ..Config::from_vars(|_| None)
        });
        let c = s.retain(1).unwrap();
        assert_eq!(s.retain(1).unwrap(), c);
        set_current_handle(c);
        assert_eq!(s.current().unwrap().device, 1);
        s.set_limit(LIMIT_STACK_SIZE, 4096).unwrap();
        assert_eq!(s.get_limit(LIMIT_STACK_SIZE).unwrap(), 4096);
        assert_eq!(s.get_limit(LIMIT_MALLOC_HEAP_SIZE).unwrap(), 8 << 20);
        s.release(1).unwrap();
        assert!(s.current().is_ok(), "one retain is left");
        let stream = s.create_stream(0).unwrap();
        s.release(1).unwrap();
        assert!(s.current().is_err());
        assert!(
            s.check_stream(stream).is_err(),
            "streams go with the context"
        );
        assert!(s.release(1).is_err(), "not retained");
        assert_eq!(s.retain(1).unwrap(), c);
        assert_eq!(s.get_limit(LIMIT_STACK_SIZE).unwrap(), 1024, "limits reset");
        assert!(s.retain(2).is_err());
        set_current_handle(0);
    }

    #[test]
    fn unknown_streams_and_events_are_invalid_handles() {
        let mut s = State::new(Config::from_vars(|_| None));
        let c = s.retain(0).unwrap();
        set_current_handle(c);
        assert!(s.check_stream(0).is_ok());
        assert!(s.check_stream(0x1234).is_err());
        let e = s.create_event().unwrap();
        assert!(s.check_event(e).is_ok());
        s.destroy_event(e).unwrap();
        let gone = s.check_event(e).unwrap_err();
        assert_eq!(gone.code, crate::errors::CUDA_ERROR_INVALID_HANDLE);
        set_current_handle(0);
    }
}
