//! The cuda plugin's whole load path on a CPU: the GPU kit's clang-16 sm_90 programs
//! and benchmarks (target/gpu-programs/sm_90/, `cargo xtask gpu-programs`: every entry
//! of its manifest's "programs" and "benchmarks", the benchmarks with their `args`) run
//! under the real libomptarget 16 with our cuda plugin and the CUDA driver stand-in
//! (target/cuda-standin/, `cargo xtask build-plugin`) as libcuda. The stand-in lays the
//! real cubins out in memory, reports every driver call, and refuses the first launch
//! (it runs no kernel), after reporting what the kernel would find: the device
//! environment and the indirect-function table. For each program and benchmark:
//!
//! a. the image loaded and a kernel launch reached the stand-in (our load_binary
//!    succeeded);
//! b. no driver call failed but that launch (a global asked for and not found counts:
//!    compute-sanitizer reports each as an API error on a GPU);
//! c. the table is right: `_size` rows, strictly increasing host keys, every device
//!    address a symbol of the cubin, and where the host address is a function or a
//!    vtable of the executable, the device symbol is that function (one of the host's
//!    names at that address: aliases give several) or the same vtable at the same
//!    offset.
//!
//! The tests of the programs and benchmarks come from one list each (`standin_tests!`),
//! which a test compares with the manifest: a program or benchmark added to the kit
//! fails it until it has its test here.
//!
//! As on the GPU machines (whose kit carries no x86_64 plugin), libomptarget finds only
//! our cuda plugin: the programs' plugin folder holds it under both names, and empty
//! libraries under the x86_64 and amdgpu plugin names, which libomptarget then skips
//! (it would otherwise load LLVM's own from beside libomptarget). One test runs a
//! program with all our plugins, as an install has them.
//!
//! `OMPTARGET_RS_PLUGIN_DIR` points the tests at other plugin files (another build's).

mod cuda_support;

use cuda_support::{build_fixture, RtlVariant};
use e2e_tests::cuda_standin::{self, Log, Row, Table};
use e2e_tests::paths::{require_file, scratch, target_dir};
use e2e_tests::plugin::{
    built_plugin, built_plugin_dir, device_image, entry, tgt_entry, LoadBinary,
};
use e2e_tests::tools::host_cc;
use host_plugin::abi::{TgtOffloadEntry, OFFLOAD_SUCCESS};
use host_plugin::generic::host_entry::FLAG_INDIRECT;
use host_plugin::{Plugin, PluginKind};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::collections::{BTreeMap, HashSet};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const SM: &str = "sm_90";
const PROGRAMS_HINT: &str = "`cargo xtask gpu-programs` (or `cargo xtask test`)";

/// target/gpu-programs/sm_90/
fn programs_dir() -> PathBuf {
    target_dir().join("gpu-programs").join(SM)
}

/// target/gpu-programs/sm_90/manifest.json (its format: harness/src/gpu_programs.rs).
fn manifest() -> serde_json::Value {
    let manifest = require_file(programs_dir().join("manifest.json"), PROGRAMS_HINT);
    serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap()
}

/// The entry `name` of the manifest's list `list` ("programs" or "benchmarks").
fn manifest_entry(list: &str, name: &str) -> serde_json::Value {
    manifest()[list]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{name}: not among the {list} of {}/manifest.json",
                programs_dir().display()
            )
        })
}

/// target/gpu-programs/sm_90/<file> for the manifest's entry `name` of `list`.
fn manifest_file(list: &str, name: &str) -> PathBuf {
    let entry = manifest_entry(list, name);
    let file = entry["file"]
        .as_str()
        .unwrap_or_else(|| panic!("{list} {name}: no file in the manifest"));
    require_file(programs_dir().join(file), PROGRAMS_HINT)
}

/// target/gpu-programs/sm_90/<file> for the program `name` of its manifest.
fn program(name: &str) -> PathBuf {
    manifest_file("programs", name)
}

/// Our plugin files' folder, checked.
fn our_plugins() -> PathBuf {
    let dir = built_plugin_dir();
    require_file(
        dir.join("libomptarget.rtl.cuda.so"),
        "`cargo xtask build-plugin` (or `cargo xtask test`)",
    );
    dir
}

/// A folder where libomptarget finds our cuda plugin (both names, copies) and no other:
/// empty libraries stand under the x86_64 and amdgpu names.
fn cuda_only_plugins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("standin-tests", "cuda-only-plugins");
        for name in [
            "libomptarget.rtl.cuda.so",
            "libomptarget.rtl.cuda.nextgen.so",
        ] {
            std::fs::copy(
                our_plugins().join("libomptarget.rtl.cuda.so"),
                dir.join(name),
            )
            .expect("copy our cuda plugin");
        }
        let empty = dir.join("empty.c");
        std::fs::write(&empty, "/* no plugin: libomptarget skips this file */\n").unwrap();
        for kind in ["x86_64", "amdgpu"] {
            for name in [
                format!("libomptarget.rtl.{kind}.so"),
                format!("libomptarget.rtl.{kind}.nextgen.so"),
            ] {
                e2e_tests::process::run_ok(
                    Command::new(host_cc())
                        .args(["-shared", "-o"])
                        .arg(dir.join(name))
                        .arg(&empty),
                );
            }
        }
        dir
    })
}

/// One run of a program with the stand-in.
struct Run {
    name: String,
    exe: PathBuf,
    output: Output,
    pid: u32,
    log: Log,
    marker: String,
}

impl Run {
    fn new(name: &str, plugins: &Path) -> Run {
        Run::with_env(name, plugins, &[])
    }

    /// The program `name` with `plugins` and the stand-in, `env` added.
    fn with_env(name: &str, plugins: &Path, env: &[(&str, String)]) -> Run {
        Run::start(name, program(name), &[], plugins, env)
    }

    /// `exe args...` (called `name` in messages and its scratch folder) with `plugins`
    /// and the stand-in, `env` added.
    fn start(
        name: &str,
        exe: PathBuf,
        args: &[String],
        plugins: &Path,
        env: &[(&str, String)],
    ) -> Run {
        let dir = scratch("standin-tests", name);
        let (log, marker) = (dir.join("standin.jsonl"), dir.join("marker"));
        let mut cmd = cuda_standin::command(&exe, plugins, &log);
        cmd.args(args);
        for (key, value) in env {
            cmd.env(key, value);
        }
        let child = cmd
            .env("OMPTARGET_RS_LOAD_MARKER", &marker)
            .env("OMP_TARGET_OFFLOAD", "MANDATORY")
            .env_remove("OMPTARGET_RS_ALLOW_HOST_FALLBACK")
            .env_remove("OMPTARGET_RS_ISOLATED")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: could not start {}: {e}", exe.display()));
        let pid = child.id();
        let output = child.wait_with_output().expect("wait for the program");
        Run {
            name: name.to_owned(),
            exe,
            output,
            pid,
            log: Log::read(&log, Some(pid)),
            marker: std::fs::read_to_string(&marker).unwrap_or_default(),
        }
    }

    /// The program's stderr and the end of its stdout, for messages.
    fn shown(&self) -> String {
        let stdout = String::from_utf8_lossy(&self.output.stdout);
        let tail: Vec<&str> = stdout.lines().rev().take(5).collect();
        format!(
            "exit: {}\nstderr:\n{}\nstdout (end):\n{}",
            self.output.status,
            String::from_utf8_lossy(&self.output.stderr).trim_end(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }

    fn check_our_cuda_plugin_ran(&self) {
        assert!(
            self.marker
                .lines()
                .any(|l| l == format!("cuda {}", self.pid)),
            "{}: our cuda plugin wrote no load marker for pid {} (marker: {:?})\n{}",
            self.name,
            self.pid,
            self.marker,
            self.shown()
        );
    }

    /// a. The image loaded and a kernel launch reached the stand-in.
    fn check_loaded_and_launched(&self) {
        assert!(
            self.log.module_loads() > 0 && !self.log.launches().is_empty(),
            "{}: no kernel launch reached the CUDA driver stand-in ({} module loads): our \
             plugin's load_binary did not succeed\n{}",
            self.name,
            self.log.module_loads(),
            self.shown()
        );
    }

    /// b. No driver call failed but the stand-in's refusal to run the kernel.
    fn check_no_driver_errors(&self) {
        let errors = self.log.errors_but_cannot_run();
        assert!(
            errors.is_empty(),
            "{}: {} driver call(s) failed (globals not found: {:?}):\n{}\n{}",
            self.name,
            errors.len(),
            self.log.globals_not_found(),
            errors
                .iter()
                .map(|(call, error, detail)| format!("  {call}: {error}: {detail}"))
                .collect::<Vec<_>>()
                .join("\n"),
            self.shown()
        );
    }

    /// c. The table the first launch would read.
    fn check_table(&self) {
        let launch = self.log.launches()[0];
        let table = launch.table.as_ref().unwrap_or_else(|| {
            panic!(
                "{}: the module launched ({}) has no table globals",
                self.name, launch.kernel
            )
        });
        let cubin = CubinSymbols::of(&self.exe);
        let host = HostSymbols::of(&self.exe);
        let (load_base, _) = self.log.init().expect("an init event");
        let load_base = load_base.unwrap_or_else(|| panic!("{}: no load base", self.name));
        let problems = table_problems(table, &cubin, &host, load_base);
        assert!(
            problems.is_empty(),
            "{}: the indirect-function table at the launch of {} ({} rows) is wrong in {} \
             place(s):\n  {}",
            self.name,
            launch.kernel,
            table.rows.len(),
            problems.len(),
            problems.join("\n  ")
        );
    }
}

/// The symbol names the program's sm_90 cubin defines.
struct CubinSymbols(HashSet<String>);

impl CubinSymbols {
    fn of(exe: &Path) -> CubinSymbols {
        let bytes = std::fs::read(exe).unwrap();
        let images = offload_formats::image::find_images(&bytes).expect("the program's images");
        let image = images
            .iter()
            .find(|i| i.arch.as_deref() == Some(SM))
            .unwrap_or_else(|| panic!("{}: no {SM} image", exe.display()));
        let file = object::File::parse(&*image.data).expect("the cubin is ELF");
        CubinSymbols(
            file.symbols()
                .filter(|s| s.is_definition())
                .filter_map(|s| s.name().ok().map(str::to_owned))
                .collect(),
        )
    }
}

/// The executable's functions and vtables by address (st_value).
struct HostSymbols {
    /// Address -> every function name there (aliases).
    functions: BTreeMap<u64, Vec<String>>,
    /// Start -> (vtable name, size).
    vtables: BTreeMap<u64, (String, u64)>,
    /// Start -> (name, size) of every data object, for messages.
    objects: BTreeMap<u64, (String, u64)>,
    /// The lowest PT_LOAD address: where the load base maps to.
    first_vaddr: u64,
}

impl HostSymbols {
    fn of(exe: &Path) -> HostSymbols {
        let bytes = std::fs::read(exe).unwrap();
        let file = object::File::parse(&*bytes).expect("the program is ELF");
        let mut functions: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        let (mut vtables, mut objects) = (BTreeMap::new(), BTreeMap::new());
        for s in file.symbols().filter(|s| s.is_definition()) {
            let Ok(name) = s.name() else { continue };
            match s.kind() {
                SymbolKind::Text => functions.entry(s.address()).or_default().push(name.into()),
                SymbolKind::Data => {
                    if name.starts_with("_ZTV") {
                        vtables.insert(s.address(), (name.to_owned(), s.size()));
                    }
                    objects.insert(s.address(), (name.to_owned(), s.size()));
                }
                _ => {}
            }
        }
        let first_vaddr = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
        HostSymbols {
            functions,
            vtables,
            objects,
            first_vaddr,
        }
    }

    /// `name+offset` of the data object holding `addr` (for messages).
    fn object_at(&self, addr: u64) -> Option<String> {
        let (start, (name, size)) = self.objects.range(..=addr).next_back()?;
        (addr - start < (*size).max(1)).then(|| format!("{name}+{}", addr - start))
    }

    /// The vtable holding `addr`: (name, offset).
    fn vtable_at(&self, addr: u64) -> Option<(&str, u64)> {
        let (start, (name, size)) = self.vtables.range(..=addr).next_back()?;
        (addr - start < *size).then(|| (name.as_str(), addr - start))
    }
}

/// What is wrong with `table` (empty: nothing).
fn table_problems(
    table: &Table,
    cubin: &CubinSymbols,
    host: &HostSymbols,
    load_base: u64,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(e) = &table.error {
        return vec![format!("the device cannot read it: {e}")];
    }
    let size = table.map_size.unwrap_or(0);
    if table.truncated || table.rows.len() as u64 != size {
        problems.push(format!(
            "{} rows listed for __omp_offloading_fptr_map_size {size}",
            table.rows.len()
        ));
    }
    for (i, pair) in table.rows.windows(2).enumerate() {
        if pair[0].host >= pair[1].host {
            problems.push(format!(
                "rows {i} and {}: host keys {:#x}, {:#x} not strictly increasing",
                i + 1,
                pair[0].host,
                pair[1].host
            ));
        }
    }
    for (i, row) in table.rows.iter().enumerate() {
        if let Err(p) = row_problem(row, cubin, host, load_base) {
            problems.push(format!(
                "row {i} (host {:#x} -> {:#x}): {p}",
                row.host, row.tgt
            ));
        }
    }
    problems
}

fn row_problem(
    row: &Row,
    cubin: &CubinSymbols,
    host: &HostSymbols,
    load_base: u64,
) -> Result<(), String> {
    // The executable's symbol value for the host address, if it is one of its.
    let value = row
        .host
        .checked_sub(load_base)
        .and_then(|v| v.checked_add(host.first_vaddr));
    let Some((device, offset)) = row.tgt_symbol().filter(|(n, _)| cubin.0.contains(*n)) else {
        let host_object = value.and_then(|v| host.object_at(v));
        let hint = match (row.tgt, host_object) {
            (0, Some(object)) => format!(": the host's {object} maps to the device's null"),
            (tgt, _) if tgt == row.host => {
                ": an identity row (a vtable word that is no pointer: a virtual-base offset or offset-to-top)".into()
            }
            _ => String::new(),
        };
        return Err(format!(
            "the device address names no symbol of the cubin ({}){hint}",
            row.tgt_name
        ));
    };
    let Some(value) = value else {
        return Ok(());
    };
    if let Some(names) = host.functions.get(&value) {
        if offset == 0 && names.iter().any(|n| same_function(n, device)) {
            return Ok(());
        }
        return Err(format!(
            "the host function {names:?} maps to the device's {}",
            row.tgt_name
        ));
    }
    if let Some((vtable, at)) = host.vtable_at(value) {
        if device == vtable && offset == at {
            return Ok(());
        }
        return Err(format!(
            "the host's {vtable}+{at} maps to the device's {}",
            row.tgt_name
        ));
    }
    Ok(())
}

/// The same function under its host and device names: equal, or a class's complete
/// destructor (`D1`) on the device where the host has its base destructor (`D2`):
/// clang 16 emits D1 as D2 on the host (`-mconstructor-aliases`: an alias symbol, or, for
/// an inline destructor, every use of D1 replaced by D2, which leaves no D1 symbol),
/// and both separately on NVPTX.
fn same_function(host: &str, device: &str) -> bool {
    let complete = |name: &str| name.replace("D2Ev", "D1Ev");
    host == device || complete(host) == complete(device)
}

/// a, b and c for one program, in the configuration of the GPU machines.
fn loads_through_the_standin(name: &str) {
    let run = Run::new(name, cuda_only_plugins());
    run.check_our_cuda_plugin_ran();
    run.check_loaded_and_launched();
    run.check_no_driver_errors();
    run.check_table();
}

/// a, b and c for the manifest's benchmark `name`, run with its GPU arguments (the
/// manifest's `args`; the stand-in stands for a GPU, and refuses the first launch, so
/// they only decide what the benchmark does before it).
fn benchmark_loads_through_the_standin(name: &str) {
    let args: Vec<String> = manifest_entry("benchmarks", name)["args"]
        .as_array()
        .unwrap_or_else(|| panic!("benchmark {name}: no args in the manifest"))
        .iter()
        .map(|a| a.as_str().expect("a string argument").to_owned())
        .collect();
    let exe = manifest_file("benchmarks", name);
    let run = Run::start(
        &format!("benchmark-{name}"),
        exe,
        &args,
        cuda_only_plugins(),
        &[],
    );
    run.check_our_cuda_plugin_ran();
    run.check_loaded_and_launched();
    run.check_no_driver_errors();
    run.check_table();
}

/// One test per name (`test_fn: "name"`): `$run("name")`, and `$names`, the list of
/// those names, which [`every_program_and_benchmark_has_a_standin_test`] compares with
/// the manifest. The tests and the list come from one list, so no test can be dropped
/// without its name leaving the list.
macro_rules! standin_tests {
    ($names:ident, $run:ident: $($(#[$meta:meta])* $test:ident: $name:literal,)*) => {
        const $names: &[&str] = &[$($name),*];
        $(
            $(#[$meta])*
            #[test]
            fn $test() {
                $run($name);
            }
        )*
    };
}

// The manifest's "programs", each through a, b and c.
standin_tests! {
    STANDIN_PROGRAMS, loads_through_the_standin:
    indirect_calls_loads_through_the_standin: "indirect_calls",
    virtual_calls_loads_through_the_standin: "virtual_calls",
    function_ptr_map_loads_through_the_standin: "function_ptr_map",
    stress_loads_through_the_standin: "stress",
    standard_virtual_calls_o0_loads_through_the_standin: "virtual_calls-O0",
    /// Seen on the first GPU run (H200): the load failed, "indirect function table: host
    /// address ... is mapped to two device addresses" (clang 16 aliases a class's
    /// destructors to its base's on the host at -O2, not on NVPTX).
    standard_virtual_calls_o2_loads_through_the_standin: "virtual_calls-O2",
    standard_indirect_standard_loads_through_the_standin: "indirect_standard",
    openmp_vv_test_target_declare_indirect_loads_through_the_standin:
        "test_target_declare_indirect",
}

// The manifest's "benchmarks", each through a, b and c.
standin_tests! {
    STANDIN_BENCHMARKS, benchmark_loads_through_the_standin:
    runtime_benchmark_loads_through_the_standin: "runtime",
    virtual_calls_benchmark_loads_through_the_standin: "virtual_calls",
}

/// What differs between the names of `manifest[list]` and `covered` (the names the
/// stand-in tests of that list run): an entry no test covers, a test of a name the
/// manifest lacks, an entry without a name. Empty: they are the same set.
fn coverage_gaps(manifest: &serde_json::Value, list: &str, covered: &[&str]) -> Vec<String> {
    let Some(entries) = manifest[list].as_array() else {
        return vec![format!("the manifest has no \"{list}\" list")];
    };
    let mut gaps = Vec::new();
    let mut named = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        match entry["name"].as_str() {
            Some(name) => {
                named.insert(name);
                if !covered.contains(&name) {
                    gaps.push(format!("{list}: {name} has no stand-in test"));
                }
            }
            None => gaps.push(format!("{list}: entry {i} has no name: {entry}")),
        }
    }
    for name in covered {
        if !named.contains(name) {
            gaps.push(format!(
                "{list}: a stand-in test runs {name}, which the manifest lacks"
            ));
        }
    }
    gaps
}

/// Every program and benchmark of the manifest has a stand-in test above, and every
/// such test runs one of the manifest's: a program added to gpu_programs.rs fails here
/// until it gets its test.
#[test]
fn every_program_and_benchmark_has_a_standin_test() {
    let manifest = manifest();
    let mut gaps = coverage_gaps(&manifest, "programs", STANDIN_PROGRAMS);
    gaps.extend(coverage_gaps(&manifest, "benchmarks", STANDIN_BENCHMARKS));
    assert!(
        gaps.is_empty(),
        "{}/manifest.json and the stand-in tests differ (add a name to standin_tests! \
         in this file):\n  {}",
        programs_dir().display(),
        gaps.join("\n  ")
    );
}

/// [`coverage_gaps`] finds what differs: a program or a benchmark added to a manifest
/// of the covered names, one removed, one without a name.
#[test]
fn coverage_gaps_names_what_no_test_covers() {
    let entries = |names: &[&str]| -> serde_json::Value {
        names
            .iter()
            .map(|n| serde_json::json!({"name": n, "file": n}))
            .collect()
    };
    let covered = serde_json::json!({
        "programs": entries(STANDIN_PROGRAMS),
        "benchmarks": entries(STANDIN_BENCHMARKS),
    });
    assert_eq!(
        coverage_gaps(&covered, "programs", STANDIN_PROGRAMS),
        Vec::<String>::new()
    );
    assert_eq!(
        coverage_gaps(&covered, "benchmarks", STANDIN_BENCHMARKS),
        Vec::<String>::new()
    );

    let mut added = covered.clone();
    added["programs"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "new_program", "file": "new_program"}));
    added["benchmarks"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "new_bench", "file": "new_bench.bench.sm_90"}));
    assert_eq!(
        coverage_gaps(&added, "programs", STANDIN_PROGRAMS),
        ["programs: new_program has no stand-in test"]
    );
    assert_eq!(
        coverage_gaps(&added, "benchmarks", STANDIN_BENCHMARKS),
        ["benchmarks: new_bench has no stand-in test"]
    );

    let mut removed = covered.clone();
    removed["programs"].as_array_mut().unwrap().remove(0);
    assert_eq!(
        coverage_gaps(&removed, "programs", STANDIN_PROGRAMS),
        [format!(
            "programs: a stand-in test runs {}, which the manifest lacks",
            STANDIN_PROGRAMS[0]
        )]
    );

    let mut unnamed = covered.clone();
    unnamed["benchmarks"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"file": "x"}));
    assert_eq!(
        coverage_gaps(&unnamed, "benchmarks", STANDIN_BENCHMARKS).len(),
        1
    );
    assert_eq!(
        coverage_gaps(&serde_json::json!({}), "benchmarks", STANDIN_BENCHMARKS),
        ["the manifest has no \"benchmarks\" list"]
    );
}

/// LLVM 16's device settings reach the driver: `LIBOMPTARGET_STACK_SIZE` and
/// `_HEAP_SIZE` as the context's limits, `LIBOMPTARGET_SHARED_MEMORY_SIZE` (over the
/// 48 KiB a kernel gets without opting in) as every launch's dynamic shared memory,
/// with the kernel's limit raised first (the driver refuses the launch otherwise).
#[test]
fn device_settings_reach_the_driver() {
    let (stack, heap, shared) = (4096u64, 16u64 << 20, 64u32 << 10);
    let run = Run::with_env(
        "indirect_calls",
        cuda_only_plugins(),
        &[
            ("LIBOMPTARGET_STACK_SIZE", stack.to_string()),
            ("LIBOMPTARGET_HEAP_SIZE", heap.to_string()),
            ("LIBOMPTARGET_SHARED_MEMORY_SIZE", shared.to_string()),
        ],
    );
    run.check_loaded_and_launched();
    run.check_no_driver_errors();
    // Each once, at the device's initialisation: before the module's load.
    let limits = run.log.limits_set();
    assert_eq!(
        limits,
        [
            ("CU_LIMIT_STACK_SIZE", stack),
            ("CU_LIMIT_MALLOC_HEAP_SIZE", heap)
        ],
        "{}: the limits set\n{}",
        run.name,
        run.shown()
    );
    let first =
        |wanted: fn(&cuda_standin::Event) -> bool| run.log.events.iter().position(wanted).unwrap();
    assert!(
        first(|e| matches!(e, cuda_standin::Event::SetLimit { .. }))
            < first(|e| matches!(e, cuda_standin::Event::ModuleLoad { .. })),
        "{}: the limits are set before the image is loaded",
        run.name
    );
    let launch = run.log.launches()[0];
    assert_eq!(
        (launch.stack_size, launch.heap_size, launch.shared_bytes),
        (stack, heap, shared),
        "{}: the launch of {} (stack, heap, dynamic shared memory)",
        run.name,
        launch.kernel
    );
}

/// As an install has them (`<prefix>/lib` holds our x86_64, cuda and amdgpu plugins;
/// libomptarget loads x86_64 first): the cuda plugin must still take its image.
#[test]
fn cuda_plugin_takes_its_image_beside_our_other_plugins() {
    let run = Run::new("test_target_declare_indirect", &our_plugins());
    run.check_our_cuda_plugin_ran();
    assert!(
        run.log.module_loads() > 0,
        "{}: with our x86_64 plugin loaded before it, our cuda plugin loaded no image \
         (libomptarget found no device for the sm_90 image)\n{}",
        run.name,
        run.shown()
    );
}

/// The fixture kernels of tests/tests/cuda_indirect.rs, with their host entries:
/// (name, host address, size, flags).
const FIXTURE_ENTRIES: [(&str, u64, u64, i32); 6] = [
    ("call_through_host_pointers", 0x100, 0, 0),
    ("translate_all", 0x108, 0, 0),
    ("translate_in_groups", 0x110, 0, 0),
    ("__omp_offloading_fn_add_one", 0x0100_0008, 8, FLAG_INDIRECT),
    (
        "__omp_offloading_fn_times_three",
        0x0100_0108,
        8,
        FLAG_INDIRECT,
    ),
    (
        "__omp_offloading_fn_square_minus_seven",
        0x0100_0208,
        8,
        FLAG_INDIRECT,
    ),
];

/// What went wrong in the events from `from` on: loads that did not happen, driver
/// calls that failed (a global not found among them).
fn report_problems(log: &Log, from: usize, how: &str) -> Vec<String> {
    let report = Log {
        events: log.events[from..].to_vec(),
    };
    let mut problems = Vec::new();
    if report.module_loads() != 1 {
        problems.push(format!(
            "{how}: {} module loads, not 1",
            report.module_loads()
        ));
    }
    let missing = report.globals_not_found();
    if !missing.is_empty() {
        problems.push(format!(
            "{how}: the plugin asked the driver for {} global(s) the fixture cubin does \
             not define (compute-sanitizer reports each as a CUDA_ERROR_NOT_FOUND API \
             error): {missing:?}",
            missing.len()
        ));
    }
    for (call, error, detail) in report.errors() {
        if !(call == "cuModuleGetGlobal_v2" && error == "CUDA_ERROR_NOT_FOUND") {
            problems.push(format!("{how}: {call} failed: {error}: {detail}"));
        }
    }
    problems
}

/// The fixture through the plugin crate's Rust API (`Plugin::new`, `Device::load_binary`)
/// in this process, whose stand-in reports to `log_file`.
fn load_through_the_crate(cubin: &[u8], log_file: &Path) -> Vec<String> {
    let plugin = Plugin::new(PluginKind::Cuda);
    if plugin.device_count() != 1 {
        return vec![format!(
            "Plugin::new(Cuda) sees {} devices, not the stand-in's 1",
            plugin.device_count()
        )];
    }
    let entries: Vec<_> = FIXTURE_ENTRIES
        .iter()
        .map(|&(name, host, size, flags)| entry(name, host, size, flags))
        .collect();
    let device = plugin.device(0).expect("device 0");
    device.init_device().expect("init device 0");
    // Interop's handles: the primary context the driver handed out for device 0 (the
    // stand-in's report says which), and CUdevice 0.
    let primary = Log::read(log_file, Some(std::process::id())).primary_context(0);
    match device.interop_handles() {
        Ok(h) if primary.is_some_and(|p| p != 0 && h.context == p) && h.device == 0 => {}
        other => {
            return vec![format!(
                "interop handles: {other:?}, not device 0's primary context ({primary:?}) \
                 and CUdevice 0"
            )]
        }
    }
    match device.load_binary(1, cubin, &entries) {
        Ok(loaded) if loaded.len() == entries.len() => {}
        Ok(loaded) => return vec![format!("load_binary: {} addresses", loaded.len())],
        Err(e) => return vec![format!("Device::load_binary: {e}")],
    }
    match device.fptr_table(1) {
        Some(table) if table.len() == 3 => vec![],
        other => vec![format!("the table: {other:?}, not 3 rows")],
    }
}

/// The fixture through the plugin file's C ABI, as libomptarget 16 loads it (the file
/// from `OMPTARGET_RS_PLUGIN_DIR` where set).
fn load_through_the_plugin_file(cubin: &[u8]) -> Vec<String> {
    type Count = unsafe extern "C" fn() -> i32;
    type InitDevice = unsafe extern "C" fn(i32) -> i32;
    let lib = e2e_tests::plugin::open(&built_plugin("cuda"));
    let names: Vec<CString> = FIXTURE_ENTRIES
        .iter()
        .map(|(name, ..)| CString::new(*name).unwrap())
        .collect();
    let mut entries: Vec<TgtOffloadEntry> = FIXTURE_ENTRIES
        .iter()
        .zip(&names)
        .map(|(&(_, host, size, flags), name)| tgt_entry(name, host as usize, size as usize, flags))
        .collect();
    let mut image = cubin.to_vec();
    let mut descriptor = device_image(&mut image, &mut entries);
    // SAFETY: LLVM 16's signatures of these entry points; the descriptor points into
    // `image` and `entries`, which outlive the calls.
    unsafe {
        let init_plugin = *lib.get::<Count>(b"__tgt_rtl_init_plugin").unwrap();
        let count = *lib.get::<Count>(b"__tgt_rtl_number_of_devices").unwrap();
        let init_device = *lib.get::<InitDevice>(b"__tgt_rtl_init_device").unwrap();
        let load_binary = *lib.get::<LoadBinary>(b"__tgt_rtl_load_binary").unwrap();
        if init_plugin() != OFFLOAD_SUCCESS || count() != 1 {
            return vec![format!("the plugin file sees {} devices, not 1", count())];
        }
        if init_device(0) != OFFLOAD_SUCCESS {
            return vec!["__tgt_rtl_init_device(0) failed".into()];
        }
        if load_binary(0, &mut descriptor).is_null() {
            return vec!["__tgt_rtl_load_binary failed".into()];
        }
    }
    vec![]
}

/// In this process, over the stand-in: the plugin sees one sm_90 device and loads the
/// fixture cubin (clang-22 + ptxas, device RTL linked in) with cuda_indirect's entries,
/// through the plugin crate's Rust API and through the plugin file's C ABI, asking the
/// driver for no global the cubin lacks.
#[test]
fn fixture_cubin_loads_in_process_asking_for_no_missing_global() {
    let log_file = scratch("standin-tests", "in-process").join("standin.jsonl");
    cuda_standin::preload(&log_file);
    let (_, cubin) = build_fixture(RtlVariant::Default, 90);
    let cubin = std::fs::read(cubin).unwrap();
    let pid = Some(std::process::id());
    let mut problems = load_through_the_crate(&cubin, &log_file);
    let crate_events = Log::read(&log_file, pid).events.len();
    problems.extend(report_problems(&Log::read(&log_file, pid), 0, "Plugin API"));
    problems.extend(load_through_the_plugin_file(&cubin));
    problems.extend(report_problems(
        &Log::read(&log_file, pid),
        crate_events,
        "plugin file",
    ));
    assert!(
        problems.is_empty(),
        "the fixture through the stand-in:\n  {}",
        problems.join("\n  ")
    );
}
