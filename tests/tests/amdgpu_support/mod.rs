//! Shared helpers of the AMDGPU tests: real code objects built with clang-22 from
//! tests/fixtures/amdgpu/indirect_kernel.c + device-rtl, and the stand-in HIP library
//! (tests/fixtures/amdgpu/fake_hip.c) with the controls it exports.
#![allow(dead_code)]

use e2e_tests::paths::{fixture, require_file, target_dir};
use e2e_tests::process::run_ok;
use e2e_tests::tools::{host_cc, llvm22};
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh, empty directory for one caller under target/amdgpu-tests/ (unique per call).
pub fn scratch(name: &str) -> PathBuf {
    e2e_tests::paths::scratch("amdgpu-tests", name)
}

/// device-rtl's bitcode for one AMDGPU processor, built by `cargo xtask build-device`.
pub fn device_rtl_bc(processor: &str) -> PathBuf {
    require_file(
        target_dir().join(format!(
            "device/amdgcn-amd-amdhsa/{processor}/device_rtl.bc"
        )),
        "`cargo xtask build-device` (or `cargo xtask test`)",
    )
}

// Host "addresses" of the fixture's indirect functions: only keys for the device, any
// distinct values do.
pub const HOST_ADD_ONE: u64 = 0x5000;
pub const HOST_NEGATE: u64 = 0x3000;
/// What the tests seed the stand-in's `ptr_to_negate` with, as the loader's relocation
/// would leave it.
pub const NEGATE_ON_DEVICE: u64 = 0x7f00_0000_1b0c;

/// The fixture kernel linked with device-rtl into a code object for `target_id`
/// (`gfx90a`, `gfx90a:xnack+`, ...), the way an AMDGPU device toolchain links it.
pub fn code_object(target_id: &str) -> Vec<u8> {
    let processor = target_id.split(':').next().unwrap_or(target_id);
    let dir = scratch(&format!(
        "code-object-{}",
        target_id
            .replace(':', "_")
            .replace('+', "p")
            .replace('-', "m")
    ));
    let obj = dir.join("indirect_kernel.o");
    let hsaco = dir.join("indirect_kernel.hsaco");
    run_ok(
        Command::new(llvm22("clang"))
            .arg("--target=amdgcn-amd-amdhsa")
            .arg(format!("-mcpu={target_id}"))
            .args(["-nogpulib", "-O2", "-c"])
            .arg(fixture("amdgpu/indirect_kernel.c"))
            .args(["-Xclang", "-mlink-builtin-bitcode", "-Xclang"])
            .arg(device_rtl_bc(processor))
            .arg("-o")
            .arg(&obj),
    );
    link_code_object(&obj, &hsaco)
}

/// An AMDGPU object file linked by ld.lld-22 into a code object (a shared object) at
/// `hsaco`, and its bytes.
pub fn link_code_object(obj: &Path, hsaco: &Path) -> Vec<u8> {
    run_ok(
        Command::new(llvm22("ld.lld"))
            .arg("-shared")
            .arg(obj)
            .arg("-o")
            .arg(hsaco),
    );
    std::fs::read(hsaco).expect("read the code object")
}

/// Code objects for `target_ids` bundled by clang-offload-bundler-22, as clang ships
/// them (with the empty host entry the bundler requires).
pub fn bundle(target_ids: &[&str]) -> Vec<u8> {
    let dir = scratch(&format!(
        "bundle-{}",
        target_ids.join("_").replace(':', "_")
    ));
    let host = dir.join("host.o");
    std::fs::write(&host, b"").unwrap();
    let mut targets = vec!["host-x86_64-unknown-linux-gnu".to_string()];
    let mut cmd = Command::new(llvm22("clang-offload-bundler"));
    cmd.arg("-type=o").arg(format!("-input={}", host.display()));
    for (i, id) in target_ids.iter().enumerate() {
        let path = dir.join(format!("{i}.hsaco"));
        std::fs::write(&path, code_object(id)).unwrap();
        targets.push(format!("openmp-amdgcn-amd-amdhsa--{id}"));
        cmd.arg(format!("-input={}", path.display()));
    }
    let out = dir.join("bundle.o");
    run_ok(
        cmd.arg(format!("-targets={}", targets.join(",")))
            .arg(format!("-output={}", out.display())),
    );
    std::fs::read(out).unwrap()
}

/// `e_flags` of an ELF64 file (where AMDGPU keeps the processor and xnack/sramecc).
pub fn e_flags(elf: &[u8]) -> u32 {
    u32::from_le_bytes(elf[48..52].try_into().unwrap())
}

/// The ELF address of a dynamic symbol of a code object.
pub fn symbol_value(code_object: &[u8], name: &str) -> u64 {
    use object::{Object, ObjectSymbol};
    let file = object::File::parse(code_object).expect("code object is ELF");
    file.dynamic_symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} is not a dynamic symbol of the code object"))
        .address()
}

/// The bytes of a defined dynamic symbol of a code object (a variable's initial value).
pub fn symbol_bytes(code_object: &[u8], name: &str) -> Vec<u8> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = object::File::parse(code_object).expect("code object is ELF");
    let sym = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("{name} is not a dynamic symbol of the code object"));
    let section = file
        .section_by_index(sym.section_index().expect("a defined symbol"))
        .unwrap();
    let data = section.data().unwrap();
    let start = (sym.address() - section.address()) as usize;
    data[start..start + sym.size() as usize].to_vec()
}

/// (grid x, block x) of the one hipModuleLaunchKernel in `log`, which must use y = z = 1.
pub fn launch_geometry(log: &[String]) -> (u32, u32) {
    let launches: Vec<&String> = log
        .iter()
        .filter(|l| l.starts_with("hipModuleLaunchKernel("))
        .collect();
    assert_eq!(
        launches.len(),
        1,
        "one launch expected:\n{}",
        log.join("\n")
    );
    let dims = |marker: &str| -> Vec<u32> {
        let at = launches[0].find(marker).unwrap() + marker.len();
        launches[0][at..]
            .split(',')
            .next()
            .unwrap()
            .split('x')
            .map(|n| n.parse().unwrap())
            .collect()
    };
    let (grid, block) = (dims("grid="), dims("block="));
    assert_eq!((&grid[1..], &block[1..]), (&[1, 1][..], &[1, 1][..]));
    (grid[0], block[0])
}

/// The stand-in HIP library, compiled into this test's own file so that each test gets
/// its own copy of the library's state (dlopen shares one instance per file).
pub struct FakeHip {
    pub path: PathBuf,
    library: libloading::Library,
}

impl FakeHip {
    /// Build it and configure its devices (comma-separated gcnArchNames, "" = none).
    pub fn new(test: &str, devices: &str) -> FakeHip {
        Self::build(test, devices, &[])
    }

    /// As `new`, but without hipDeviceGetAttribute and hipFuncGetAttribute, like a HIP
    /// runtime older than them.
    pub fn without_attributes(test: &str, devices: &str) -> FakeHip {
        Self::build(test, devices, &["-DFAKE_HIP_NO_ATTRIBUTES"])
    }

    fn build(test: &str, devices: &str, defines: &[&str]) -> FakeHip {
        let dir = scratch(&format!("fake-hip-{test}"));
        let path = dir.join("libamdhip64.so");
        run_ok(
            Command::new(host_cc())
                .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror"])
                .args(defines)
                .arg(fixture("amdgpu/fake_hip.c"))
                .arg("-o")
                .arg(&path)
                .arg("-lpthread"),
        );
        // SAFETY: the stand-in's constructors do nothing; it stays open (and shared with
        // the backend, which opens the same file) for the whole test.
        let library = unsafe { libloading::Library::new(&path) }.expect("dlopen the stand-in");
        let fake = FakeHip { path, library };
        let list = CString::new(devices).unwrap();
        // SAFETY: fake_hip_configure(const char *) copies the string.
        unsafe {
            let f = fake
                .library
                .get::<unsafe extern "C" fn(*const c_char)>(b"fake_hip_configure")
                .unwrap();
            f(list.as_ptr());
        }
        fake
    }

    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("a UTF-8 target dir")
    }

    /// Every call logged so far, one per line.
    pub fn log(&self) -> Vec<String> {
        // SAFETY: fake_hip_log() returns a NUL-terminated buffer valid until the next
        // call into the library; it is copied at once.
        unsafe {
            let f = self
                .library
                .get::<unsafe extern "C" fn() -> *const c_char>(b"fake_hip_log")
                .unwrap();
            CStr::from_ptr(f())
                .to_string_lossy()
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    pub fn clear_log(&self) {
        // SAFETY: no arguments.
        unsafe {
            let f = self
                .library
                .get::<unsafe extern "C" fn()>(b"fake_hip_clear_log")
                .unwrap();
            f();
        }
    }

    /// The first word every later-created global called `name` starts with.
    pub fn seed_global(&self, name: &str, value: u64) {
        let name = CString::new(name).unwrap();
        // SAFETY: the name is copied by the callee.
        unsafe {
            let f = self
                .library
                .get::<unsafe extern "C" fn(*const c_char, u64)>(b"fake_hip_seed_global")
                .unwrap();
            f(name.as_ptr(), value);
        }
    }

    /// What hipDeviceGetAttribute answers for `attribute` on every device (0: the
    /// stand-in's default, -1: an error). Takes effect for backends created afterwards.
    pub fn set_device_attribute(&self, attribute: i32, value: i32) {
        // SAFETY: fake_hip_set_device_attribute(int, int) takes plain values.
        unsafe {
            let f = self
                .library
                .get::<unsafe extern "C" fn(i32, i32)>(b"fake_hip_set_device_attribute")
                .unwrap();
            f(attribute, value);
        }
    }

    /// What hipFuncGetAttribute(MAX_THREADS_PER_BLOCK) answers for kernels called `name`.
    pub fn set_kernel_max_threads(&self, name: &str, max_threads: i32) {
        let name = CString::new(name).unwrap();
        // SAFETY: the name is copied by the callee.
        unsafe {
            let f = self
                .library
                .get::<unsafe extern "C" fn(*const c_char, i32)>(b"fake_hip_set_kernel_max_threads")
                .unwrap();
            f(name.as_ptr(), max_threads);
        }
    }

    /// Where the stand-in keeps global `name` of the last loaded module (host memory).
    pub fn global_address(&self, name: &str) -> Option<u64> {
        let name = CString::new(name).unwrap();
        // SAFETY: the name is only read during the call.
        let p = unsafe {
            let f = self
                .library
                .get::<unsafe extern "C" fn(*const c_char) -> *mut c_void>(
                    b"fake_hip_global_address",
                )
                .unwrap();
            f(name.as_ptr())
        };
        (!p.is_null()).then_some(p as u64)
    }
}
