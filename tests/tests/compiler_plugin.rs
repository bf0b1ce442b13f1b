//! Standard OpenMP 5.1 `declare target indirect` programs (no project header) built with
//! the stock clang-16 through the *installed* x86_64 config file, and run with
//! `LD_LIBRARY_PATH=<prefix>/lib` only: the compiler plugin, the device RTL and our
//! libomptarget plugin together (issue 17).
//!
//! The prefix is target/install, which `cargo xtask test` fills with
//! `cargo xtask install --prefix target/install` before `cargo test`.
use e2e_tests::paths::{fixture, require_file, scratch, target_dir};
use e2e_tests::process::run_ok;
use e2e_tests::tools::{clang16, llvm16, llvm22};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HOW: &str = "`cargo xtask install --prefix target/install`";

fn prefix() -> PathBuf {
    target_dir().join("install")
}

fn layout() -> install_layout::Prefix {
    install_layout::Prefix::new(prefix())
}

fn x86_config() -> PathBuf {
    require_file(layout().config(install_layout::HOST_TRIPLE), HOW)
}

/// What the compiler printed (warnings) and the program it built.
struct Built {
    exe: PathBuf,
    stderr: String,
}

/// `clang-16` (or `clang++-16` for .cpp) `--config=<config> <opt> <sources> -o exe`.
fn build(config: &Path, opt: &str, sources: &[PathBuf], extra: &[&str], name: &str) -> Built {
    build_with_env(config, opt, sources, extra, name, &[])
}

/// [`build`] with `env` set for the compiler (the compiler plugin's switches).
fn build_with_env(
    config: &Path,
    opt: &str,
    sources: &[PathBuf],
    extra: &[&str],
    name: &str,
    env: &[(&str, &str)],
) -> Built {
    let cxx = sources
        .iter()
        .any(|s| s.extension().is_some_and(|e| e == "cpp"));
    let driver = if cxx { llvm16("clang++") } else { clang16() };
    let exe = scratch("compiler-plugin", name).join(name);
    let out = run_ok(
        Command::new(driver)
            .envs(env.iter().copied())
            .arg(format!("--config={}", config.display()))
            .arg(opt)
            .args(extra)
            .args(sources)
            .arg("-o")
            .arg(&exe),
    );
    Built {
        exe,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Run with only the installed lib/ on the library path; the load marker proves our
/// x86_64 plugin ran the program.
fn run(exe: &Path) -> (Output, String) {
    let marker = exe.with_extension("load-marker");
    let _ = fs::remove_file(&marker);
    let out = Command::new(exe)
        .env("LD_LIBRARY_PATH", prefix().join("lib"))
        .env("OMPTARGET_RS_LOAD_MARKER", &marker)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let loaded = fs::read_to_string(&marker).unwrap_or_default();
    (out, loaded)
}

/// Every `case ...: ok` line, and the program's own count; fails on any WRONG case.
fn assert_all_cases_pass(exe: &Path, expected_cases: usize) {
    let (out, loaded) = run(exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed ({}):\n{stdout}\n{stderr}",
        exe.display(),
        out.status
    );
    let ok = stdout
        .lines()
        .filter(|l| l.starts_with("case ") && l.ends_with(": ok"))
        .count();
    let wrong: Vec<&str> = stdout.lines().filter(|l| l.ends_with("WRONG")).collect();
    assert!(wrong.is_empty(), "wrong cases:\n{}", wrong.join("\n"));
    assert_eq!(ok, expected_cases, "{stdout}");
    assert!(
        stdout.contains(&format!("indirect cases: {expected_cases} ok, 0 wrong")),
        "{stdout}"
    );
    assert!(
        loaded.lines().any(|l| l.starts_with("x86_64 ")),
        "our x86_64 plugin did not run {} (load marker: {loaded:?})",
        exe.display()
    );
}

fn standard_c() -> PathBuf {
    fixture("compiler/indirect_standard.c")
}

/// 7 forms/kinds through an array, captured, 2 in structs, from a declare target
/// function, taken on the device, in a teams-parallel loop, and indirect(0).
const C_CASES: usize = 14;
/// 5 kinds of C++ functions through an array, and a captured overload.
const CXX_CASES: usize = 6;

#[test]
fn c_at_o0_every_case_calls_the_device_version() {
    let (defines, cases) = standard_c_cases();
    let built = build(
        &x86_config(),
        "-O0",
        &[standard_c()],
        defines,
        "standard-c-o0",
    );
    assert_all_cases_pass(&built.exe, cases);
}

#[test]
fn c_at_o2_every_case_calls_the_device_version() {
    let (defines, cases) = standard_c_cases();
    let built = build(
        &x86_config(),
        "-O2",
        &[standard_c()],
        defines,
        "standard-c-o2",
    );
    assert_all_cases_pass(&built.exe, cases);
}

/// The standard program's defines and case count: a device with an address space of
/// its own (the isolated host device, as a GPU) leaves out the one case that calls a
/// host function through its untranslated host address (`indirect(0)`), which faults
/// there.
fn standard_c_cases() -> (&'static [&'static str], usize) {
    if e2e_tests::isolated() {
        (&["-DINDIRECT_GPU"], C_CASES - 1)
    } else {
        (&[], C_CASES)
    }
}

#[test]
fn cxx_at_o2_mangled_and_internal_functions_call_the_device_version() {
    let source = fixture("compiler/indirect_standard.cpp");
    let built = build(&x86_config(), "-O2", &[source], &[], "standard-cxx-o2");
    assert_all_cases_pass(&built.exe, CXX_CASES);
}

#[test]
fn cxx_at_o0_mangled_and_internal_functions_call_the_device_version() {
    let source = fixture("compiler/indirect_standard.cpp");
    let built = build(&x86_config(), "-O0", &[source], &[], "standard-cxx-o0");
    assert_all_cases_pass(&built.exe, CXX_CASES);
}

#[test]
fn without_the_compiler_plugin_the_same_program_gets_host_versions() {
    // The control: the installed config minus the two plugin lines. Only the cases that
    // need no translation (taken on the device, indirect(0)) can pass.
    let built = build(
        &config_without_plugin(),
        "-O2",
        &[standard_c()],
        &[],
        "control",
    );
    let (out, _) = run(&built.exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if e2e_tests::isolated() {
        // Where host addresses fault, as on a GPU: the first untranslated call ends it.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.contains("faulted on the device: call to address")
                && stderr.contains("a host address"),
            "{}\n{stdout}\n{stderr}",
            out.status
        );
        return;
    }
    assert!(
        stdout.contains(&format!("indirect cases: 2 ok, {} wrong", C_CASES - 2)),
        "{stdout}"
    );
}

/// The installed x86_64 config minus the two plugin lines.
fn config_without_plugin() -> PathBuf {
    let dir = scratch("compiler-plugin", "no-plugin-config");
    let config = dir.join("no-plugin.cfg");
    let text = fs::read_to_string(x86_config()).unwrap();
    fs::write(
        &config,
        test_support::config::without_compiler_plugin(&text, &prefix()),
    )
    .unwrap();
    config
}

#[test]
fn static_functions_of_two_units_do_not_collide_and_a_declaring_unit_is_warned() {
    let sources = [
        fixture("compiler/two_units_a.c"),
        fixture("compiler/two_units_b.c"),
    ];
    let built = build(&x86_config(), "-O2", &sources, &[], "two-units");
    assert_all_cases_pass(&built.exe, 3);
    // The diagnostic, through clang's DiagnosticsEngine with the declaration's location;
    // once per unit that only declares the function (two_units_a.c), host compile only.
    let warning = "two_units.h:8:5: warning: function 'defined_in_b' is 'declare target \
                   indirect' but this translation unit does not define it: no offload entry \
                   is made for it here, so a pointer to it is translated on the device only \
                   if the translation unit that defines it also marks it indirect";
    assert_eq!(built.stderr.matches(warning).count(), 1, "{}", built.stderr);
}

#[test]
fn an_inline_function_two_units_register_gets_one_table_entry() {
    let sources = [
        fixture("compiler/inline_unit_a.cpp"),
        fixture("compiler/inline_unit_b.cpp"),
    ];
    let built = build(&x86_config(), "-O2", &sources, &[], "inline-two-units");
    assert_all_cases_pass(&built.exe, 2);
    // Both units' entries are in the program (weak symbols, but section contents are
    // not merged), naming the same holder...
    let entries = run_ok(
        Command::new(prefix().join("bin/offload-inspect"))
            .arg("entries")
            .arg(&built.exe),
    );
    let listing = String::from_utf8_lossy(&entries.stdout);
    let twice = listing
        .lines()
        .filter(|l| l.ends_with("_Z5twicei -> device __omp_offloading_indirect__Z5twicei"))
        .count();
    assert_eq!(twice, 2, "{listing}");
    // ...and the plugin's table holds the identical pair once.
    let out = Command::new(&built.exe)
        .env("LD_LIBRARY_PATH", prefix().join("lib"))
        .env("LIBOMPTARGET_INFO", "16")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("indirect function table, 1 entries"),
        "{stderr}"
    );
}

#[test]
fn openmp_vv_test_target_declare_indirect_passes_with_its_functions_registered() {
    let dir = fixture("third_party/openmp_vv");
    let source = dir.join("test_target_declare_indirect.c");
    let include = format!("-I{}", dir.display());
    for opt in ["-O0", "-O2"] {
        let built = build(
            &x86_config(),
            opt,
            std::slice::from_ref(&source),
            &[&include],
            "openmp-vv",
        );
        let (out, _) = run(&built.exe);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert!(
            stdout.contains("Test passed on the device."),
            "{opt}: {stdout}"
        );
        // Its functions return constants, so the host versions would pass too: the
        // entries prove the plugin registered all three (declare target to(...) indirect).
        let entries = run_ok(
            Command::new(prefix().join("bin/offload-inspect"))
                .arg("entries")
                .arg(&built.exe),
        );
        let listing = String::from_utf8_lossy(&entries.stdout);
        for f in ["fun1", "fun2", "fun3"] {
            assert!(
                listing.lines().any(|l| l.starts_with("IndirectFunction")
                    && l.ends_with(&format!("{f} -> device __omp_offloading_indirect_{f}"))),
                "{opt}: no indirect entry for {f}:\n{listing}"
            );
        }
    }
}

/// The device module (x86_64 offload, device side only) as LLVM IR text, with every
/// lookup left a call (what these tests read: the rewrites themselves).
fn device_ir(source: &str, file_name: &str, opt: &str, name: &str) -> String {
    device_ir_with(source, file_name, opt, name, false)
}

/// [`device_ir`], with the lookups written out inline (the default) or not.
fn device_ir_with(
    source: &str,
    file_name: &str,
    opt: &str,
    name: &str,
    inline_lookups: bool,
) -> String {
    let dir = scratch("compiler-plugin", name);
    let src = dir.join(file_name);
    fs::write(&src, source).unwrap();
    let ll = dir.join("prog.ll");
    let driver = if file_name.ends_with(".cpp") {
        llvm16("clang++")
    } else {
        clang16()
    };
    run_ok(
        Command::new(driver)
            .env(
                "OMPTARGET_INDIRECT_INLINE_LOOKUP",
                if inline_lookups { "1" } else { "0" },
            )
            .arg(format!("--config={}", x86_config().display()))
            .args([opt, "--offload-device-only", "-S", "-emit-llvm"])
            .arg(&src)
            .arg("-o")
            .arg(&ll),
    );
    fs::read_to_string(ll).unwrap()
}

const CONSTANT_POINTER: &str = r#"
#pragma omp declare target indirect
int f(int x) { return x + 1; }
#pragma omp end declare target
int main(void) {
  int r = 0;
#pragma omp target map(from : r)
  {
    int (*fp)(int) = f;
    r = fp(41);
  }
  return r != 42;
}
"#;

#[test]
fn a_call_that_optimization_makes_direct_gets_no_lookup() {
    let o2 = device_ir(CONSTANT_POINTER, "prog.c", "-O2", "direct-o2");
    assert!(
        !o2.contains("call ptr @__kmpc_target_translate_fptr"),
        "-O2 made the call direct, yet it was translated:\n{o2}"
    );
    // The control: at -O0 the same call stays indirect and gets the lookup.
    let o0 = device_ir(CONSTANT_POINTER, "prog.c", "-O0", "direct-o0");
    assert!(
        o0.contains("call ptr @__kmpc_target_translate_fptr"),
        "{o0}"
    );
    // Both keep the holder global the host entry names.
    for ir in [&o0, &o2] {
        assert!(
            ir.contains("@__omp_offloading_indirect_f = weak protected constant ptr @f"),
            "{ir}"
        );
    }
}

const LOOP_OF_CALLS: &str = r#"
#pragma omp declare target
int apply_all(int (**fns)(int), int n, int x) {
  for (int i = 0; i < n; ++i)
    x = fns[i % 4](x);
  return x;
}
#pragma omp end declare target
"#;

/// For the host device the lookup is written out where it is called: the head and the
/// index header are loaded once, at the function's entry, as invariant loads, and the
/// device RTL's lookup is called only where it would search (no index).
#[test]
fn host_device_lookups_are_inline_with_the_tables_header_loaded_at_entry() {
    for opt in ["-O0", "-O2"] {
        let ir = device_ir_with(LOOP_OF_CALLS, "prog.c", opt, &format!("inline{opt}"), true);
        let body = ir
            .split("define ")
            .find(|f| f.contains("@apply_all("))
            .unwrap_or_else(|| panic!("no apply_all in:\n{ir}"));
        // The entry block: its instructions are indented, up to the first label (or the
        // function's end), which is not.
        let entry: String = body
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .collect::<Vec<_>>()
            .join("\n");
        for global in ["@__omptarget_rs_fptr_head", "@__omptarget_rs_fptr_index"] {
            assert!(
                entry.contains(global) && entry.contains("!invariant.load"),
                "{opt}: the entry block loads no {global}:\n{entry}"
            );
        }
        assert!(
            !body.contains("@__omptarget_rs_translate_inline"),
            "{opt}: the helper was not inlined:\n{body}"
        );
        let lookups: Vec<&str> = body
            .lines()
            .filter(|l| l.contains("call ptr @__kmpc_target_translate_fptr("))
            .collect();
        assert_eq!(
            lookups.len(),
            1,
            "{opt}: one call, on the search path:\n{body}"
        );
    }
    // The control: without the inline step, one call per indirect call and no head.
    let ir = device_ir(LOOP_OF_CALLS, "prog.c", "-O2", "inline-off");
    assert!(!ir.contains("@__omptarget_rs_fptr_head"), "{ir}");
    assert!(
        ir.contains("call ptr @__kmpc_target_translate_fptr("),
        "{ir}"
    );
}

const INVOKE: &str = r#"
#pragma omp declare target
int guarded(int (*fp)(int), int x) {
  __asm__ volatile("" ::: "memory"); // inline asm: a call LLVM makes, never translated
  try { return fp(x); } catch (...) { return -1; }
}
#pragma omp end declare target
"#;

#[test]
fn an_invoke_through_a_pointer_is_translated_too_and_inline_asm_is_not() {
    let ir = device_ir(INVOKE, "prog.cpp", "-O0", "invoke");
    assert!(ir.contains("call void asm sideeffect"), "{ir}");
    assert_eq!(
        ir.matches("call ptr @__kmpc_target_translate_fptr(")
            .count(),
        1,
        "{ir}"
    );
    let lookup = ir
        .lines()
        .find(|l| l.contains("= call ptr @__kmpc_target_translate_fptr("))
        .unwrap_or_else(|| panic!("no lookup:\n{ir}"));
    let translated = lookup.trim().split(' ').next().unwrap();
    assert!(
        ir.lines()
            .any(|l| l.contains("invoke") && l.contains(&format!(" {translated}("))),
        "the invoke does not call the lookup's result {translated}:\n{ir}"
    );
}

#[test]
fn the_plugin_refuses_another_clang_and_says_which() {
    let plugin = require_file(layout().compiler_plugin(16), HOW);
    let dir = scratch("compiler-plugin", "clang22");
    let src = dir.join("x.c");
    fs::write(&src, "int f(int x) { return x; }\n").unwrap();
    for flag in ["-fplugin", "-fpass-plugin"] {
        let out = Command::new(llvm22("clang"))
            .arg("-c")
            .arg(format!("{flag}={}", plugin.display()))
            .arg(&src)
            .arg("-o")
            .arg(dir.join("x.o"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: clang-22 accepted it");
        assert!(
            stderr.contains(
                "error: the omptarget-indirect compiler plugin is built for clang 16 (LLVM 16) \
                 but was loaded by a compiler running LLVM 22."
            ),
            "{flag}: {stderr}"
        );
        assert!(!stderr.contains("Stack dump"), "{flag}: {stderr}");
    }
}

#[test]
fn installed_plugin_copies_are_small_and_point_to_their_debug_info() {
    let lib = prefix().join("lib");
    let debug = require_file(lib.join(".debug/libomptarget-rs.debug"), HOW);
    assert!(
        fs::metadata(&debug).unwrap().len() > 1 << 20,
        "debug info is in the split file"
    );
    for kind in ["x86_64", "cuda", "amdgpu"] {
        for name in [
            format!("libomptarget.rtl.{kind}.so"),
            format!("libomptarget.rtl.{kind}.nextgen.so"),
        ] {
            let path = require_file(lib.join(&name), HOW);
            let size = fs::metadata(&path).unwrap().len();
            assert!(size <= 4 << 20, "{name} is {size} bytes");
            let sections = run_ok(
                Command::new(llvm22("llvm-readelf"))
                    .args(["--string-dump=.gnu_debuglink"])
                    .arg(&path),
            );
            let text = String::from_utf8_lossy(&sections.stdout);
            assert!(text.contains("libomptarget-rs.debug"), "{name}: {text}");
        }
    }
}

// ---- C++ virtual functions (tests/fixtures/virtual) ----

/// virtual_calls.cpp's cases on the x86_64 host device (typeid included).
const VIRTUAL_CASES: usize = 24;

fn virtual_sources() -> [PathBuf; 2] {
    [
        fixture("virtual/virtual_calls.cpp"),
        fixture("virtual/virtual_other_unit.cpp"),
    ]
}

/// Run `exe` on the isolated host device (`isolated` true) or in-process.
fn run_mode(exe: &Path, isolated: bool) -> Output {
    Command::new(exe)
        .env("LD_LIBRARY_PATH", prefix().join("lib"))
        .env("OMPTARGET_RS_ISOLATED", if isolated { "1" } else { "0" })
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()))
}

fn assert_virtual_cases_pass(exe: &Path) {
    // Both devices, whatever the test process's mode: the isolated one is where a
    // missed translation faults instead of reading the host's vtable.
    for isolated in [true, false] {
        let out = run_mode(exe, isolated);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success()
                && stdout.contains(&format!("virtual cases: {VIRTUAL_CASES} ok, 0 wrong")),
            "{} (isolated: {isolated}) {}:\n{stdout}\n{stderr}",
            exe.display(),
            out.status
        );
    }
}

#[test]
fn cxx_virtual_calls_on_host_and_device_built_objects_at_o0() {
    let built = build(&x86_config(), "-O0", &virtual_sources(), &[], "virtual-o0");
    assert!(!built.stderr.contains("warning"), "{}", built.stderr);
    assert_virtual_cases_pass(&built.exe);
}

#[test]
fn cxx_virtual_calls_on_host_and_device_built_objects_at_o2() {
    let built = build(&x86_config(), "-O2", &virtual_sources(), &[], "virtual-o2");
    assert!(!built.stderr.contains("warning"), "{}", built.stderr);
    assert_virtual_cases_pass(&built.exe);
}

/// A GPU's image has no constructor or destructor aliases where the host has them
/// (clang's `-mconstructor-aliases`, on by default for ELF hosts): one host address then
/// stands for two device functions. An x86_64 device image built without aliases while
/// the host keeps them shows the same on the CPU; it loads, every case passes on both
/// devices, and the debug log says which addresses were shared.
#[test]
fn cxx_virtual_calls_at_o2_with_a_device_image_without_aliases() {
    let built = build(
        &x86_config(),
        "-O2",
        &virtual_sources(),
        &[
            "-Xopenmp-target=x86_64-pc-linux-gnu",
            "-Xclang=-mno-constructor-aliases",
        ],
        "virtual-o2-no-device-aliases",
    );
    assert!(!built.stderr.contains("warning"), "{}", built.stderr);
    assert_virtual_cases_pass(&built.exe);
    assert_one_host_address_has_two_device_functions(&built.exe);
}

/// Two indirect functions of the same code, folded into one host address by the host
/// link (`--icf=all`), two functions on the device: the program loads and both calls run
/// the device's code, in-process and on the isolated host device. The plugin's debug log
/// shows that the device did keep two (else this tests nothing).
#[test]
fn indirect_functions_the_host_link_folded_call_the_device_code() {
    let built = build(
        &x86_config(),
        "-O2",
        &[fixture("compiler/folded_functions.c")],
        &["-ffunction-sections", "-fuse-ld=lld", "-Wl,--icf=all"],
        "folded-functions",
    );
    assert_one_host_address_has_two_device_functions(&built.exe);
    for isolated in [true, false] {
        let out = run_mode(&built.exe, isolated);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stdout.contains("folded: yes"),
            "the host link did not fold the two functions, so this tests nothing:\n{stdout}"
        );
        assert!(
            out.status.success()
                && stdout.contains("inc_a(1) = 2, inc_b(2) = 3, ran on the device: yes"),
            "{} (isolated: {isolated}) {}:\n{stdout}\n{stderr}",
            built.exe.display(),
            out.status
        );
    }
}

/// The plugin's debug log of `exe`'s load says that one host address stands for two
/// device functions (host-plugin/src/generic/table/fptr.rs).
fn assert_one_host_address_has_two_device_functions(exe: &Path) {
    let out = Command::new(exe)
        .env("LD_LIBRARY_PATH", prefix().join("lib"))
        .env("OMPTARGET_RS_DEBUG", "1")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && stderr.contains("is one function on the host and 2 on the device")
            && stderr.contains("translates to the first"),
        "{}: no host address with two device functions:\n{stderr}",
        out.status
    );
}

#[test]
fn without_the_compiler_plugin_virtual_calls_read_host_vtables() {
    // The control: the same program without the plugin. On the isolated device the
    // first host-built object's vptr read faults, naming the host vtable; in-process
    // the host's vtable is read and host functions run (off by where()'s 1000).
    let built = build(
        &config_without_plugin(),
        "-O2",
        &virtual_sources(),
        &[],
        "virtual-control",
    );
    let out = run_mode(&built.exe, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("faulted on the device: read of address")
            && stderr.contains("(a host address: _ZTV"),
        "{}\n{stderr}",
        out.status
    );
    let out = run_mode(&built.exe, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let wrong = stdout.lines().filter(|l| l.ends_with("WRONG")).count();
    assert!(!out.status.success() && wrong > 0, "{stdout}");
}

const DEVIRTUALIZED: &str = r#"
#pragma omp declare target
struct A { virtual int f() const { return 1; } virtual ~A() {} };
struct B : A { int f() const override { return 2; } };
int through_base() {
  B b;
  const A *a = &b; // the optimizer sees b's vptr stored, then loaded
  return a->f();
}
#pragma omp end declare target
"#;

#[test]
fn a_virtual_call_the_optimizer_devirtualizes_stays_direct() {
    let o2 = device_ir(DEVIRTUALIZED, "prog.cpp", "-O2", "devirt-o2");
    let body = o2
        .split("define ")
        .find(|f| f.contains("through_base"))
        .unwrap_or_else(|| panic!("no through_base in:\n{o2}"));
    assert!(
        !body.contains("__kmpc_target_translate_fptr") && body.contains("ret i32 2"),
        "-O2 resolved the call, yet it was translated:\n{body}"
    );
    // The control: at -O0 the vptr load goes through the lookup, and the vtables have
    // holders for the host entries.
    let o0 = device_ir(DEVIRTUALIZED, "prog.cpp", "-O0", "devirt-o0");
    assert!(
        o0.contains("call ptr @__kmpc_target_translate_fptr(ptr %"),
        "{o0}"
    );
    for class in ["1A", "1B"] {
        let holder = format!(
            "@__omp_offloading_indirect__ZTV{class} = weak protected constant ptr @_ZTV{class},"
        );
        assert!(o0.contains(&holder), "{o0}");
    }
}

#[test]
fn a_dynamic_cast_the_device_cannot_run_is_an_error_at_the_cast() {
    let dir = scratch("compiler-plugin", "dynamic-cast");
    let src = dir.join("prog.cpp");
    fs::write(
        &src,
        r#"
#pragma omp declare target
struct A { virtual ~A() {} };
struct B : A {};
int is_b(A *a) { return dynamic_cast<B *>(a) != 0; }
#pragma omp end declare target
int main() { A a; int r = 0;
#pragma omp target map(from : r)
  r = is_b(&a);
  return r; }
"#,
    )
    .unwrap();
    let out = Command::new(llvm16("clang++"))
        .arg(format!("--config={}", x86_config().display()))
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(dir.join("prog.o"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("prog.cpp:5:")
            && stderr.contains("error: dynamic_cast to 'B *' in device code needs the C++ runtime"),
        "{stderr}"
    );
}

#[test]
fn a_class_called_virtually_whose_function_another_unit_defines_is_warned() {
    let dir = scratch("compiler-plugin", "defined-elsewhere");
    let src = dir.join("prog.cpp");
    fs::write(
        &src,
        r#"
struct Shape { virtual int area() const { return 1; } virtual ~Shape() {} };
struct Tri : Shape { int area() const override; }; // defined in another unit
int area_on_device(const Shape *s) {
  int r = 0;
#pragma omp target map(to : s[0 : 1]) map(from : r)
  r = s->area();
  return r;
}
"#,
    )
    .unwrap();
    let out = run_ok(
        Command::new(llvm16("clang++"))
            .arg(format!("--config={}", x86_config().display()))
            .args(["-Wno-openmp-mapping", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(dir.join("prog.o")),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("prog.cpp:3:8: warning: device code calls virtual functions of 'Tri', but its virtual function 'area' is not 'declare target' and is defined in another translation unit")
            && stderr.matches("warning:").count() == 1,
        "{stderr}"
    );
}

/// A program of `n` indirect functions whose kernel asks the lookup written out inline
/// (a call of `__kmpc_target_translate_fptr` in the source, which the compiler plugin
/// writes out like the ones it inserts) and the device RTL's own, out of line (the same
/// function through a pointer), for every key of its table and for keys around them,
/// each twice in a row and alternating (the per-site memo's hits and misses); then calls
/// every function through its host pointer. Prints
/// `lookups: <keys> asked, <d> differ, <t> translated; calls: <c> ok` and exits 0.
fn differential_program(n: usize) -> String {
    let mut src = String::from(
        "#include <stdint.h>\n#include <stdio.h>\n\
         #pragma omp declare target\n\
         void *__kmpc_target_translate_fptr(void *);\n\
         static inline void *inline_lookup(void *p) { return p; }\n\
         static inline void *out_of_line_lookup(void *p) { return p; }\n\
         #pragma omp end declare target\n\
         #pragma omp begin declare variant match(device = {kind(nohost)})\n\
         static inline void *inline_lookup(void *p) { return __kmpc_target_translate_fptr(p); }\n\
         static inline void *out_of_line_lookup(void *p) {\n\
           void *(*lookup)(void *) = __kmpc_target_translate_fptr;\n\
           __asm__ volatile(\"\" : \"+r\"(lookup)); /* opaque: the call stays a call */\n\
           return lookup(p);\n\
         }\n\
         #pragma omp end declare variant\n\
         #pragma omp declare target indirect\n",
    );
    for i in 0..n {
        src += &format!("int f{i}(int x) {{ return x * 1000 + {i}; }}\n");
    }
    src += "#pragma omp end declare target\ntypedef int (*fn_t)(int);\n";
    let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
    src += &format!("fn_t fns[{n}] = {{{}}};\n", names.join(", "));
    src += &format!(
        r#"
#define N {n}
#define KEYS (N * 12 + 8)
int main(void) {{
  static uint64_t keys[KEYS], inline_out[KEYS], out_of_line_out[KEYS];
  int k = 0;
  for (int i = 0; i < N; ++i) {{
    uint64_t p = (uint64_t)(uintptr_t)fns[i], q = (uint64_t)(uintptr_t)fns[(i + 1) % N];
    uint64_t around[6] = {{p, p, q, p, p + 1, p - 1}};
    for (int j = 0; j < 6; ++j) keys[k++] = around[j];
    uint64_t more[6] = {{p + 8, q, p, p - 8, p ^ 1, p}};
    for (int j = 0; j < 6; ++j) keys[k++] = more[j];
  }}
  uint64_t edges[8] = {{0, 0, 1, ~0ull, ~0ull - 7, (uint64_t)(uintptr_t)&keys,
                        0x123456789abcdefull, 0}};
  for (int j = 0; j < 8; ++j) keys[k++] = edges[j];
  int calls_ok = 0;
#pragma omp target map(to : keys, fns) map(from : inline_out, out_of_line_out, calls_ok)
  {{
    for (int i = 0; i < KEYS; ++i) {{
      inline_out[i] = (uint64_t)(uintptr_t)inline_lookup((void *)(uintptr_t)keys[i]);
      out_of_line_out[i] = (uint64_t)(uintptr_t)out_of_line_lookup((void *)(uintptr_t)keys[i]);
    }}
    int ok = 0;
    for (int round = 0; round < 3; ++round)
      for (int i = 0; i < N; ++i)
        ok += fns[i](round) == round * 1000 + i;
    calls_ok = ok;
  }}
  int differ = 0, translated = 0;
  for (int i = 0; i < KEYS; ++i) {{
    if (inline_out[i] != out_of_line_out[i] && differ++ < 5)
      printf("key %#llx: inline %#llx, out of line %#llx\n", (unsigned long long)keys[i],
             (unsigned long long)inline_out[i], (unsigned long long)out_of_line_out[i]);
  }}
  for (int i = 0; i < N; ++i)
    translated += inline_out[12 * i] != keys[12 * i];
  printf("lookups: %d asked, %d differ, %d translated; calls: %d ok\n", KEYS, differ,
         translated, calls_ok);
  return 0;
}}
"#
    );
    src
}

/// The compiler plugin's count, from its `OMPTARGET_INDIRECT_DEBUG` lines, of what it did
/// in the x86_64 device module: (indirect calls translated, lookups written out inline).
fn x86_64_device_counts(compiler_stderr: &str) -> (usize, usize) {
    let count = |what: &str| -> usize {
        let counts: Vec<usize> = compiler_stderr
            .lines()
            .filter(|l| l.starts_with("omptarget-indirect: ") && l.contains(" (x86_64"))
            .filter_map(|l| l.strip_suffix(what)?.rsplit(": ").next()?.parse().ok())
            .collect();
        assert_eq!(
            counts.len(),
            1,
            "one x86_64 device module's {what:?} line expected:\n{compiler_stderr}"
        );
        counts[0]
    };
    (
        count(" indirect call(s) translated"),
        count(" lookup(s) written out inline"),
    )
}

/// [`differential_program`] of `n` functions built at -O2 through the installed config,
/// with the compiler plugin's debug lines and `env`.
fn differential_build(n: usize, name: &str, env: &[(&str, &str)]) -> Built {
    let dir = scratch("compiler-plugin", name);
    let src = dir.join("prog.c");
    fs::write(&src, differential_program(n)).unwrap();
    let mut env = env.to_vec();
    env.push(("OMPTARGET_INDIRECT_DEBUG", "1"));
    build_with_env(&x86_config(), "-O2", &[src], &[], name, &env)
}

/// The lookup written out inline answers exactly as the device RTL's, for tables in the
/// head (1 and 4 functions) and beyond it (5 and 40: the index), with the index and
/// without it (the search), in-process and isolated; and through LLVM's own x86_64
/// plugin, which installs no table, both return every key unchanged (and the calls reach
/// the host's functions, in the same process). The compiler plugin's own count shows
/// that the inline side was written out inline (the program's one explicit call, and one
/// per indirect call it translated), so the two sides are not the same call.
#[test]
fn the_inline_lookup_answers_as_the_device_runtimes_at_every_table_shape() {
    for n in [1usize, 4, 5, 40] {
        let built = differential_build(n, &format!("inline-diff-{n}"), &[]);
        let (translated, inlined) = x86_64_device_counts(&built.stderr);
        assert!(
            translated >= 1 && inlined == translated + 1 && !built.stderr.contains("out of line"),
            "{n} functions: the explicit lookup was not written out inline \
             ({translated} translated, {inlined} inline):\n{}",
            built.stderr
        );
        let exe = built.exe;
        // (label, environment, functions the lookup translates)
        type Run<'a> = (&'a str, &'a [(&'a str, &'a str)], usize);
        let runs: [Run; 4] = [
            ("in-process", &[("OMPTARGET_RS_ISOLATED", "0")], n),
            ("isolated", &[("OMPTARGET_RS_ISOLATED", "1")], n),
            (
                "no index",
                &[
                    ("OMPTARGET_RS_ISOLATED", "0"),
                    ("OMPTARGET_RS_FPTR_INDEX", "0"),
                ],
                n,
            ),
            ("LLVM's plugin", &[("OMPTARGET_RS_ISOLATED", "0")], 0),
        ];
        for (label, env, translated) in runs {
            let lib = if label == "LLVM's plugin" {
                PathBuf::from("/usr/lib/llvm-16/lib")
            } else {
                prefix().join("lib")
            };
            let out = Command::new(&exe)
                .env("LD_LIBRARY_PATH", lib)
                .envs(env.iter().copied())
                .output()
                .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
            let stdout = String::from_utf8_lossy(&out.stdout);
            // Every call succeeds either way: through LLVM's plugin, in-process, a host
            // pointer left untranslated reaches the host's function.
            let want = format!(
                "lookups: {} asked, 0 differ, {translated} translated; calls: {} ok",
                n * 12 + 8,
                3 * n
            );
            assert!(
                out.status.success() && stdout.contains(&want),
                "{n} functions, {label}: {}\nwant {want:?}\n{stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The differential test's own check, by mutation: each deliberately wrong inline lookup
/// ([`MUTANTS`], `OMPTARGET_INDIRECT_INLINE_MUTANT`) makes its program report lookups
/// that differ from the device RTL's, at the table shape that reaches the broken part.
/// The differential test asserts `0 differ`, so it would fail on each.
#[test]
fn the_differential_test_catches_each_wrong_inline_lookup() {
    // (mutant, functions: 40 has the index, whose second bucket one mutant skips)
    const MUTANTS: [(&str, usize); 2] = [("memo-second-answer", 4), ("first-bucket-only", 40)];
    for (mutant, n) in MUTANTS {
        let built = differential_build(
            n,
            &format!("inline-mutant-{mutant}"),
            &[("OMPTARGET_INDIRECT_INLINE_MUTANT", mutant)],
        );
        assert!(
            built.stderr.contains("MUTANT") && x86_64_device_counts(&built.stderr).1 >= 1,
            "{mutant}: the plugin did not write the mutant inline:\n{}",
            built.stderr
        );
        let out = Command::new(&built.exe)
            .env("LD_LIBRARY_PATH", prefix().join("lib"))
            .env("OMPTARGET_RS_ISOLATED", "0")
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", built.exe.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let differ: usize = stdout
            .lines()
            .find_map(|l| l.strip_prefix("lookups: "))
            .and_then(|l| l.split(", ").nth(1)?.strip_suffix(" differ")?.parse().ok())
            .unwrap_or_else(|| panic!("{mutant}: no lookups line:\n{stdout}"));
        assert!(
            differ > 0,
            "{mutant}: the wrong inline lookup answered as the device RTL's on every key, \
             so the differential test would not see it:\n{stdout}"
        );
    }
}
