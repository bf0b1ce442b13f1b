//! Every error path of a load, run on a backend that fails on cue: what the plugin
//! allocated for a failed load is freed (nothing leaks), and what a refused free left
//! behind is the driver's alone.

use crate::backend::{
    AllocKind, Backend, BackendDevice, BackendError, DeviceAddr, LoadedModule, StagedImage,
};
use crate::generic::host_entry::{HostOffloadEntry, FLAG_INDIRECT};
use crate::{Plugin, PluginError, PluginKind};
use device_rtl::symbols::{INDEX_C, TABLE_C, TABLE_SIZE_C};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, CString};
use std::sync::{Arc, Mutex};

/// When the backend fails.
#[derive(Clone, Debug, Default)]
struct FailOn {
    /// A write into memory the plugin allocated (the table or index copy).
    write_into_allocation: bool,
    /// A write to this module global.
    write_to_global: Option<&'static CStr>,
    /// Looking up this module global.
    lookup_of: Option<&'static CStr>,
    /// Freeing any of these allocations.
    free_of: BTreeSet<DeviceAddr>,
}

/// Device memory as ranges: the module's globals and the plugin's allocations.
#[derive(Default)]
struct Memory {
    next: DeviceAddr,
    /// Address -> bytes, for both kinds.
    ranges: BTreeMap<DeviceAddr, Vec<u8>>,
    allocations: BTreeSet<DeviceAddr>,
    globals: BTreeMap<CString, DeviceAddr>,
}

impl Memory {
    fn place(&mut self, len: usize) -> DeviceAddr {
        let addr = 0x10_0000 + self.next;
        self.next += (len as u64).next_multiple_of(64) + 64;
        self.ranges.insert(addr, vec![0; len]);
        addr
    }

    /// The range holding `addr .. addr + len`, and the offset of `addr` in it.
    fn range_of(&mut self, addr: DeviceAddr, len: usize) -> Option<(DeviceAddr, usize)> {
        let (&start, bytes) = self.ranges.range(..=addr).next_back()?;
        let at = (addr - start) as usize;
        (at + len <= bytes.len()).then_some((start, at))
    }
}

/// A backend whose device is a map of byte ranges, failing where [`FailOn`] says.
#[derive(Clone)]
struct FailingBackend {
    memory: Arc<Mutex<Memory>>,
    fail: Arc<Mutex<FailOn>>,
    /// The globals (name, size) each loaded module has.
    module_globals: Arc<Vec<(&'static CStr, usize)>>,
    /// What some of them hold when loaded (else zeros).
    initial_contents: Arc<Vec<(&'static CStr, Vec<u8>)>>,
}

/// Our device runtime's table globals, which every module has unless a test says.
const OUR_RUNTIME: [(&CStr, usize); 3] = [(TABLE_C, 8), (TABLE_SIZE_C, 8), (INDEX_C, 32)];

impl Default for FailingBackend {
    fn default() -> Self {
        Self::with_module_globals(&OUR_RUNTIME)
    }
}

fn refused(call: &'static str) -> BackendError {
    BackendError::Driver {
        call,
        code: 999,
        name: "refused by the test".into(),
    }
}

impl FailingBackend {
    fn with_module_globals(globals: &[(&'static CStr, usize)]) -> Self {
        FailingBackend {
            memory: Arc::default(),
            fail: Arc::default(),
            module_globals: Arc::new(globals.to_vec()),
            initial_contents: Arc::default(),
        }
    }

    /// Module global `name` starts with `bytes` (in every module loaded).
    fn with_contents(mut self, name: &'static CStr, bytes: Vec<u8>) -> Self {
        Arc::make_mut(&mut self.initial_contents).push((name, bytes));
        self
    }

    /// The bytes of a module global.
    fn global_bytes(&self, name: &CStr) -> Vec<u8> {
        let memory = self.memory.lock().unwrap();
        memory.ranges[&memory.globals[name]].clone()
    }

    /// `len` bytes at `addr`.
    fn bytes_at(&self, addr: DeviceAddr, len: usize) -> Vec<u8> {
        let mut memory = self.memory.lock().unwrap();
        let (start, at) = memory.range_of(addr, len).expect("mapped");
        memory.ranges[&start][at..at + len].to_vec()
    }

    fn live_allocations(&self) -> BTreeSet<DeviceAddr> {
        self.memory.lock().unwrap().allocations.clone()
    }

    fn fail(&self, on: FailOn) {
        *self.fail.lock().unwrap() = on;
    }
}

struct FakeModule {
    backend: FailingBackend,
}

impl LoadedModule for FakeModule {
    fn global(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        if self.backend.fail.lock().unwrap().lookup_of == Some(name) {
            return Err(refused("lookup"));
        }
        let memory = self.backend.memory.lock().unwrap();
        memory
            .globals
            .get(name)
            .copied()
            .ok_or_else(|| BackendError::MissingSymbol(name.to_string_lossy().into()))
    }

    /// Kernel `kernel` is at 0xe000_0000; nothing else is a function.
    fn function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        match name.to_bytes() {
            b"kernel" => Ok(0xe000_0000),
            _ => Err(BackendError::MissingSymbol(name.to_string_lossy().into())),
        }
    }

    /// Indirect function `fN` is at 0xd000_0000 + 16 N.
    fn indirect_function(&self, name: &CStr) -> Result<DeviceAddr, BackendError> {
        let n: u64 = name
            .to_str()
            .ok()
            .and_then(|s| s[1..].parse().ok())
            .unwrap_or(0);
        Ok(0xd000_0000 + 16 * n)
    }

    fn global_size(&self, name: &CStr) -> Option<u64> {
        let memory = self.backend.memory.lock().unwrap();
        let addr = *memory.globals.get(name)?;
        memory.ranges.get(&addr).map(|b| b.len() as u64)
    }
}

impl Backend for FailingBackend {
    fn elf_machine(&self) -> u16 {
        0
    }
    fn device_count(&self) -> usize {
        1
    }
    fn device(&self, _: usize) -> Arc<dyn BackendDevice> {
        Arc::new(self.clone())
    }
    fn inspect_image<'a>(
        &self,
        _image: &'a [u8],
    ) -> Result<Option<crate::elf::image::ImageSymbols<'a>>, crate::elf::image::ImageError> {
        Ok(None)
    }
}

impl BackendDevice for FailingBackend {
    fn index(&self) -> usize {
        0
    }
    fn init(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn load_image(
        &self,
        _image: &[u8],
        _symbols: Option<&crate::elf::symbols::ImageSymbols<'_>>,
        _staged: Option<StagedImage>,
    ) -> Result<Box<dyn LoadedModule>, BackendError> {
        let mut memory = self.memory.lock().unwrap();
        for &(name, len) in self.module_globals.iter() {
            let addr = memory.place(len);
            memory.globals.insert(name.to_owned(), addr);
        }
        for (name, bytes) in self.initial_contents.iter() {
            let addr = memory.globals[*name];
            memory.ranges.get_mut(&addr).unwrap()[..bytes.len()].copy_from_slice(bytes);
        }
        Ok(Box::new(FakeModule {
            backend: self.clone(),
        }))
    }
    fn alloc(&self, size: usize, _kind: AllocKind) -> Result<DeviceAddr, BackendError> {
        let mut memory = self.memory.lock().unwrap();
        let addr = memory.place(size);
        memory.allocations.insert(addr);
        Ok(addr)
    }
    unsafe fn free(&self, addr: DeviceAddr) -> Result<(), BackendError> {
        if self.fail.lock().unwrap().free_of.contains(&addr) {
            return Err(refused("free"));
        }
        let mut memory = self.memory.lock().unwrap();
        if !memory.allocations.remove(&addr) {
            return Err(BackendError::Load(format!(
                "{addr:#x} freed twice or never allocated"
            )));
        }
        memory.ranges.remove(&addr);
        Ok(())
    }
    unsafe fn write(&self, dst: DeviceAddr, src: &[u8]) -> Result<(), BackendError> {
        let fail = self.fail.lock().unwrap().clone();
        let mut memory = self.memory.lock().unwrap();
        let (start, at) = memory
            .range_of(dst, src.len())
            .ok_or_else(|| BackendError::Bounds(format!("write outside memory at {dst:#x}")))?;
        let into_allocation = memory.allocations.contains(&start);
        let to_global = fail
            .write_to_global
            .is_some_and(|name| memory.globals.get(name) == Some(&start));
        if (into_allocation && fail.write_into_allocation) || to_global {
            return Err(refused("write"));
        }
        memory.ranges.get_mut(&start).unwrap()[at..at + src.len()].copy_from_slice(src);
        Ok(())
    }
    unsafe fn read(&self, src: DeviceAddr, dst: &mut [u8]) -> Result<(), BackendError> {
        let mut memory = self.memory.lock().unwrap();
        let (start, at) = memory
            .range_of(src, dst.len())
            .ok_or_else(|| BackendError::Bounds(format!("read outside memory at {src:#x}")))?;
        dst.copy_from_slice(&memory.ranges[&start][at..at + dst.len()]);
        Ok(())
    }
    unsafe fn copy(
        &self,
        _: DeviceAddr,
        _: &dyn BackendDevice,
        _: DeviceAddr,
        _: usize,
    ) -> Result<(), BackendError> {
        Err(refused("copy"))
    }
    unsafe fn launch(
        &self,
        _: DeviceAddr,
        _: &[DeviceAddr],
        _: Option<crate::support::launch_shape::Shape>,
    ) -> Result<(), BackendError> {
        Err(refused("launch"))
    }
    fn device_info(&self) -> Vec<String> {
        vec!["device 0: a map of byte ranges that fails on cue".into()]
    }
    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// 64 indirect functions `f0..f63`: a table and an index.
fn entries() -> Vec<HostOffloadEntry<'static>> {
    (0..64)
        .map(|n| HostOffloadEntry {
            host_addr: 0x5555_0000 + 16 * n,
            name: Cow::Owned(CString::new(format!("f{n}")).unwrap()),
            size: 0,
            flags: FLAG_INDIRECT,
            host_vtable: None,
        })
        .collect()
}

fn plugin() -> (Plugin, FailingBackend) {
    let backend = FailingBackend::default();
    (
        Plugin::with_backend(PluginKind::X86_64, Box::new(backend.clone())),
        backend,
    )
}

const KEY: usize = 0x1000;

/// The load fails with `fail` set, and leaves no allocation behind.
fn fails_without_a_leak(fail: FailOn, expected: &str) {
    let (plugin, backend) = plugin();
    backend.fail(fail);
    let device = plugin.device(0).unwrap();
    let err = device.load_binary(KEY, b"image", &entries()).unwrap_err();
    assert!(err.to_string().contains(expected), "{err}");
    assert_eq!(device.loaded_images(), 0);
    assert_eq!(
        backend.live_allocations(),
        BTreeSet::new(),
        "leaked after: {err}"
    );
}

#[test]
fn a_load_that_succeeds_allocates_a_table_and_an_index_and_unload_frees_both() {
    let (plugin, backend) = plugin();
    let device = plugin.device(0).unwrap();
    device.load_binary(KEY, b"image", &entries()).unwrap();
    assert_eq!(backend.live_allocations().len(), 2);
    let index = device.fptr_index(KEY).unwrap();
    assert!(index.header.bucket_count > 0, "{index:?}");
    device.unload(KEY).unwrap();
    assert_eq!(backend.live_allocations(), BTreeSet::new());
}

#[test]
fn a_failed_table_write_after_its_allocation_frees_it() {
    let fail = FailOn {
        write_into_allocation: true,
        ..FailOn::default()
    };
    fails_without_a_leak(fail, "copying the indirect table");
}

#[test]
fn a_failed_table_global_write_frees_the_table() {
    let fail = FailOn {
        write_to_global: Some(TABLE_SIZE_C),
        ..FailOn::default()
    };
    fails_without_a_leak(fail, "writing the indirect table globals");
}

#[test]
fn a_failed_index_global_lookup_allocates_nothing() {
    let fail = FailOn {
        lookup_of: Some(INDEX_C),
        ..FailOn::default()
    };
    fails_without_a_leak(fail, "could not load it");
}

#[test]
fn a_failed_index_header_write_after_the_upload_frees_table_and_index() {
    let fail = FailOn {
        write_to_global: Some(INDEX_C),
        ..FailOn::default()
    };
    fails_without_a_leak(fail, "writing the index global");
}

#[test]
fn a_failed_release_of_the_replaced_image_frees_the_new_one() {
    let (plugin, backend) = plugin();
    let device = plugin.device(0).unwrap();
    device.load_binary(KEY, b"image", &entries()).unwrap();
    let first = backend.live_allocations();
    assert_eq!(first.len(), 2);
    // The driver refuses to free the first image's table and index.
    backend.fail(FailOn {
        free_of: first.clone(),
        ..FailOn::default()
    });
    let err = device.load_binary(KEY, b"image", &entries()).unwrap_err();
    assert!(
        matches!(err, PluginError::Backend { ref what, .. } if what.contains("freeing the indirect table")),
        "{err}"
    );
    // The second image's table and index went back; only what the driver kept is left.
    assert_eq!(backend.live_allocations(), first);
    assert_eq!(device.loaded_images(), 0);
}

#[test]
fn a_failed_replacement_through_set_function_ptr_map_leaks_nothing() {
    let (plugin, backend) = plugin();
    let device = plugin.device(0).unwrap();
    device.load_binary(KEY, b"image", &entries()).unwrap();
    let rows = device.fptr_table(KEY).unwrap();
    backend.fail(FailOn {
        write_into_allocation: true,
        ..FailOn::default()
    });
    let err = device.set_function_ptr_map(&rows).unwrap_err();
    assert!(
        err.to_string().contains("copying the indirect table"),
        "{err}"
    );
    // The old index was turned off and freed first, the new table freed on failure:
    // the old table alone is left, still the image's.
    assert_eq!(backend.live_allocations().len(), 1);
    device.unload(KEY).unwrap();
    assert_eq!(backend.live_allocations(), BTreeSet::new());
}

/// LLVM 17's and 18's device runtimes (images built by clang 17 or 18) name it so.
const DEVICE_ENVIRONMENT: &CStr = c"__omp_rtl_device_environment";

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

#[test]
fn an_llvm_18_device_environment_gets_the_device_facts_and_the_table() {
    // An image of LLVM 18's device runtime alone: the table goes where its
    // `__llvm_omp_indirect_call_lookup` reads it.
    let backend = FailingBackend::with_module_globals(&[(DEVICE_ENVIRONMENT, 48)]);
    let plugin = Plugin::with_backend(PluginKind::Cuda, Box::new(backend.clone()));
    let device = plugin.device(0).unwrap();
    device.load_binary(KEY, b"image", &entries()).unwrap();
    let env = backend.global_bytes(DEVICE_ENVIRONMENT);
    assert_eq!(env[4..12], [1, 0, 0, 0, 0, 0, 0, 0], "1 device, number 0");
    assert_eq!(u64_at(&env, 16), 1_000_000, "the generic clock frequency");
    let (table, rows) = (u64_at(&env, 24), u64_at(&env, 32));
    assert_eq!(rows, 64);
    assert_eq!(backend.live_allocations(), BTreeSet::from([table]));
    let bytes = backend.bytes_at(table, 64 * 16);
    for (n, row) in bytes.chunks(16).enumerate() {
        let n = n as u64;
        assert_eq!(
            u64_at(row, 0),
            0x5555_0000 + 16 * n,
            "sorted by host address"
        );
        assert_eq!(u64_at(row, 8), 0xd000_0000 + 16 * n);
    }
    device.unload(KEY).unwrap();
    assert_eq!(backend.live_allocations(), BTreeSet::new());
}

#[test]
fn an_llvm_17_device_environment_beside_our_runtime_gets_the_clock() {
    let mut globals = OUR_RUNTIME.to_vec();
    globals.push((DEVICE_ENVIRONMENT, 24));
    let backend = FailingBackend::with_module_globals(&globals);
    let plugin = Plugin::with_backend(PluginKind::Cuda, Box::new(backend.clone()));
    let device = plugin.device(0).unwrap();
    device.load_binary(KEY, b"image", &entries()).unwrap();
    let env = backend.global_bytes(DEVICE_ENVIRONMENT);
    assert_eq!(u64_at(&env, 16), 1_000_000);
    let table = u64_at(&backend.global_bytes(TABLE_C), 0);
    assert_eq!(u64_at(&backend.global_bytes(TABLE_SIZE_C), 0), 64);
    assert!(backend.live_allocations().contains(&table));
}

#[test]
fn a_device_environment_of_an_unknown_size_fails_the_load_without_a_leak() {
    let mut globals = OUR_RUNTIME.to_vec();
    globals.push((DEVICE_ENVIRONMENT, 32));
    let backend = FailingBackend::with_module_globals(&globals);
    let plugin = Plugin::with_backend(PluginKind::Cuda, Box::new(backend.clone()));
    let device = plugin.device(0).unwrap();
    let err = device.load_binary(KEY, b"image", &entries()).unwrap_err();
    assert!(
        err.to_string().contains("is 32 bytes; LLVM 16's is 16"),
        "{err}"
    );
    assert_eq!(device.loaded_images(), 0);
    assert_eq!(backend.live_allocations(), BTreeSet::new());
}

/// A clang 18 kernel's `<kernel>_kernel_environment`: its configuration with `mode` and
/// a reduction of `data_size` x `buffer_length` bytes.
fn kernel_environment(mode: u8, data_size: i32, buffer_length: i32) -> Vec<u8> {
    let mut bytes = vec![2, 2, mode, 0];
    for word in [-1i32, -1, -1, -1, data_size, buffer_length] {
        bytes.extend(word.to_le_bytes());
    }
    bytes
}

fn kernel_entry() -> HostOffloadEntry<'static> {
    HostOffloadEntry {
        host_addr: 0x4000,
        name: Cow::Borrowed(c"kernel"),
        size: 0,
        flags: 0,
        host_vtable: None,
    }
}

#[test]
fn a_clang_18_kernel_gets_its_mode_from_its_kernel_environment() {
    use crate::support::launch_shape::ExecMode;
    for (mode, expected) in [(1, ExecMode::Generic), (2, ExecMode::Spmd)] {
        let backend = FailingBackend::with_module_globals(&[(c"kernel_kernel_environment", 48)])
            .with_contents(c"kernel_kernel_environment", kernel_environment(mode, 0, 0));
        let plugin = Plugin::with_backend(PluginKind::Cuda, Box::new(backend));
        let device = plugin.device(0).unwrap();
        device
            .load_binary(KEY, b"image", &[kernel_entry()])
            .unwrap();
        let record = device.loaded_kernel(0xe000_0000).unwrap();
        assert_eq!(record.mode, Some(expected));
        assert_eq!(record.reduction_buffer_bytes, 0);
    }
}

#[test]
fn a_clang_18_teams_reduction_is_refused_at_launch_not_run_through_a_bad_pointer() {
    let backend = FailingBackend::with_module_globals(&[(c"kernel_kernel_environment", 48)])
        .with_contents(c"kernel_kernel_environment", kernel_environment(2, 8, 1024));
    let plugin = Plugin::with_backend(PluginKind::Cuda, Box::new(backend));
    let device = plugin.device(0).unwrap();
    device
        .load_binary(KEY, b"image", &[kernel_entry()])
        .unwrap();
    assert_eq!(
        device
            .loaded_kernel(0xe000_0000)
            .unwrap()
            .reduction_buffer_bytes,
        8 * 1024
    );
    // SAFETY: the launch is refused before the (fake, always refusing) backend is asked.
    let err =
        unsafe { device.launch_teams(0xe000_0000, &[u64::MAX], Default::default()) }.unwrap_err();
    assert!(
        err.to_string().contains("8192-byte reduction buffer"),
        "{err}"
    );
}

#[test]
fn a_kernel_environment_of_another_size_fails_the_load() {
    let backend = FailingBackend::with_module_globals(&[(c"kernel_kernel_environment", 40)]);
    let plugin = Plugin::with_backend(PluginKind::Cuda, Box::new(backend.clone()));
    let device = plugin.device(0).unwrap();
    let err = device
        .load_binary(KEY, b"image", &[kernel_entry()])
        .unwrap_err();
    assert!(
        err.to_string().contains("is 40 bytes, LLVM 18's is 48"),
        "{err}"
    );
    assert_eq!(backend.live_allocations(), BTreeSet::new());
}
