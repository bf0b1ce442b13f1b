//! Link-survival tests of the device RTL on the artifacts `cargo xtask build-device`
//! writes under target/device/.
//!
//! clang's `-mlink-builtin-bitcode` internalizes what it links; a table global that
//! loses its external visibility is constant-folded to its initializer (null) and the
//! lookup silently disappears. These tests link the real bitcode into a real kernel
//! (tests/fixtures/device/lookup_kernel.c) and check the final PTX, cubin and AMD code
//! object: the table globals and the index header global still exist, externally
//! visible and writable, and the kernels still load them. The x86_64 static library is linked into C programs that run.
use e2e_tests::paths::{require_file, target_dir};
use e2e_tests::process::{run_ok, stdout_of};
use e2e_tests::tools::{llvm22, ptxas};
use object::elf;
use object::read::{File, Object, ObjectSection, ObjectSymbol, RelocationTarget, SectionIndex};
use object::{SectionFlags, SymbolScope};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const MAP_P: &str = "__omp_offloading_fptr_map_p";
const MAP_SIZE: &str = "__omp_offloading_fptr_map_size";
const INDEX: &str = "__omptarget_rs_fptr_index";
const HEAD: &str = "__omptarget_rs_fptr_head";
const LOOKUP: &str = "__kmpc_target_translate_fptr";
const GLOBALS: [&str; 4] = [MAP_P, MAP_SIZE, INDEX, HEAD];

/// The size of each global in bytes.
fn global_size(name: &str) -> u64 {
    match name {
        INDEX => 32,
        HEAD => 96,
        _ => 8,
    }
}
const AMDGPU_ARCHES: [&str; 3] = ["gfx90a", "gfx942", "gfx1100"];
const KERNELS: [&str; 2] = ["translate_all", "call_indirect"];

/// A file under target/device/, which must exist.
fn device_artifact(relative: &str) -> PathBuf {
    require_file(
        target_dir().join("device").join(relative),
        "`cargo xtask build-device`",
    )
}

fn fixture(name: &str) -> PathBuf {
    e2e_tests::paths::fixture("device").join(name)
}

/// A fresh directory for one test's outputs.
fn scratch(test: &str) -> PathBuf {
    e2e_tests::paths::scratch("device-link-tests", test)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Link the device RTL bitcode into the test kernel the way a device toolchain links
/// its runtime.
fn clang_kernel(target_args: &[&str], bc: &Path, out_flag: &str, out: &Path) {
    clang_kernel_with(&llvm22("clang"), target_args, bc, out_flag, out);
}

/// [`clang_kernel`] with another clang.
fn clang_kernel_with(clang: &Path, target_args: &[&str], bc: &Path, out_flag: &str, out: &Path) {
    run_ok(
        Command::new(clang)
            .args(target_args)
            .args(["-nogpulib", "-O2", out_flag])
            .arg(fixture("lookup_kernel.c"))
            .args(["-Xclang", "-mlink-builtin-bitcode", "-Xclang"])
            .arg(bc)
            .arg("-o")
            .arg(out),
    );
}

/// The lines of one PTX function, from its `.entry`/`.func` line to its closing brace.
fn ptx_function<'a>(ptx: &'a str, name: &str) -> Vec<&'a str> {
    let mut lines = ptx.lines();
    let start = lines
        .position(|l| {
            (l.contains(".entry") || l.contains(".func")) && l.contains(&format!(" {name}("))
        })
        .unwrap_or_else(|| panic!("no function {name} in the PTX"));
    ptx.lines().skip(start).take_while(|l| *l != "}").collect()
}

/// A prebuilt PTX file of `cargo xtask build-device` (`dir` is the triple's folder or its
/// variant's) for one SM, checked to target that SM and to declare both globals
/// `.weak .global`.
fn prebuilt_ptx(dir: &str, sm: &str) -> String {
    let ptx = String::from_utf8(read(&device_artifact(&format!(
        "{dir}/device_rtl.{sm}.ptx"
    ))))
    .expect("PTX is text");
    assert!(
        ptx.contains(&format!(".target {sm}")),
        "{dir} {sm} PTX targets another GPU"
    );
    for g in GLOBALS {
        assert!(
            ptx.lines()
                .any(|l| l.starts_with(".weak .global") && l.contains(g)),
            "{dir} {sm} PTX does not declare {g} as .weak .global"
        );
    }
    ptx
}

/// ptxas for sm_90 on `ptx`, writing `cubin`; returns the cubin's bytes.
fn assemble_sm90(ptx: &Path, cubin: &Path) -> Vec<u8> {
    run_ok(
        Command::new(ptxas())
            .args(["-arch=sm_90"])
            .arg(ptx)
            .arg("-o")
            .arg(cubin),
    );
    read(cubin)
}

/// The `target triple` and `target datalayout` lines of an LLVM module in text form.
fn triple_and_datalayout(ll: &str) -> (String, String) {
    let line = |prefix: &str| {
        ll.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line"))
            .to_string()
    };
    (line("target triple"), line("target datalayout"))
}

/// Every symbol any relocation in `file` (static or dynamic) points at, by the name of
/// the section the relocation applies to ("<dynamic>" for dynamic relocations).
fn relocation_targets(file: &File) -> BTreeSet<(String, String)> {
    let symbol_name = |index| {
        file.symbol_by_index(index)
            .ok()
            .and_then(|s| s.name().ok().map(str::to_string))
            .unwrap_or_default()
    };
    let mut targets = BTreeSet::new();
    for section in file.sections() {
        let section_name = section.name().unwrap_or_default().to_string();
        for (_, reloc) in section.relocations() {
            if let RelocationTarget::Symbol(index) = reloc.target() {
                targets.insert((section_name.clone(), symbol_name(index)));
            }
        }
    }
    if let Some(dynamic) = file.dynamic_relocations() {
        for (_, reloc) in dynamic {
            if let RelocationTarget::Symbol(index) = reloc.target() {
                let name = file
                    .dynamic_symbols()
                    .find(|s| s.index() == index)
                    .and_then(|s| s.name().ok().map(str::to_string))
                    .unwrap_or_default();
                targets.insert(("<dynamic>".to_string(), name));
            }
        }
    }
    targets
}

fn section_is_writable(file: &File, index: SectionIndex) -> (String, bool) {
    let section = file
        .section_by_index(index)
        .expect("symbol's section exists");
    let name = section.name().unwrap_or_default().to_string();
    let writable = match section.flags() {
        SectionFlags::Elf { sh_flags } => sh_flags & u64::from(elf::SHF_WRITE) != 0,
        _ => false,
    };
    (name, writable)
}

/// Where the globals may live in a linked image.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sections {
    /// A writable section: the host writes them in place (x86_64), or the section is
    /// where a cubin's globals live (`.nv.global`).
    Writable,
    /// Any section: the GPU bitcode marks them constant, which AMDGPU puts in `.rodata`.
    /// The runtime's copies still write it: LLVM's own AMDGPU plugin writes its device
    /// environment, a constant (address space 4) global, there.
    ReadOnlyToo,
}

/// Every global is in `symbols`: not local, weak or global binding, of its size, defined
/// in a section `sections` allows.
fn assert_globals_exported<'d, 'f>(
    what: &str,
    file: &'f File<'d>,
    symbols: impl Iterator<Item = object::read::Symbol<'d, 'f>>,
    sections: Sections,
) {
    let symbols: Vec<_> = symbols.collect();
    for name in GLOBALS {
        let sym = symbols
            .iter()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{what}: no symbol {name}"));
        assert!(
            sym.is_global() || sym.is_weak(),
            "{what}: {name} is local after the link"
        );
        assert_ne!(
            sym.scope(),
            SymbolScope::Compilation,
            "{what}: {name} is not exported"
        );
        assert_eq!(
            sym.size(),
            global_size(name),
            "{what}: {name} has the wrong size"
        );
        let index = sym
            .section_index()
            .unwrap_or_else(|| panic!("{what}: {name} is undefined"));
        let (section, writable) = section_is_writable(file, index);
        assert!(
            writable || sections == Sections::ReadOnlyToo,
            "{what}: {name} lives in read-only section {section}"
        );
    }
}

#[test]
fn bitcode_matches_clang_22_triple_datalayout_and_cpu() {
    let mut cases = vec![(
        "nvptx64-nvidia-cuda/device_rtl.bc".to_string(),
        [
            "--target=nvptx64-nvidia-cuda",
            "-march=sm_70",
            "-Xclang",
            "-target-feature",
            "-Xclang",
            "+ptx80",
        ]
        .map(String::from)
        .to_vec(),
        "sm_70".to_string(),
    )];
    for gfx in AMDGPU_ARCHES {
        cases.push((
            format!("amdgcn-amd-amdhsa/{gfx}/device_rtl.bc"),
            vec![
                "--target=amdgcn-amd-amdhsa".to_string(),
                format!("-mcpu={gfx}"),
            ],
            gfx.to_string(),
        ));
    }
    for (relative, clang_args, cpu) in cases {
        let bc = device_artifact(&relative);
        let ours = stdout_of(Command::new(llvm22("llvm-dis")).arg(&bc).arg("-o").arg("-"));
        let clangs = stdout_of(Command::new(llvm22("clang")).args(&clang_args).args([
            "-nogpulib",
            "-S",
            "-emit-llvm",
            "-x",
            "c",
            "/dev/null",
            "-o",
            "-",
        ]));
        assert_eq!(
            triple_and_datalayout(&ours),
            triple_and_datalayout(&clangs),
            "{relative}: triple/datalayout differ from clang-22's, -mlink-builtin-bitcode would reject or miscompile it"
        );
        assert!(
            ours.contains(&format!("\"target-cpu\"=\"{cpu}\"")),
            "{relative} was not built for {cpu}"
        );
        // Nothing left to resolve on the device: no call into `core` (a panic, say).
        let undefined = stdout_of(
            Command::new(llvm22("llvm-nm"))
                .arg("--undefined-only")
                .arg(&bc),
        );
        assert!(undefined.trim().is_empty(), "{relative} needs: {undefined}");
        let defined = stdout_of(
            Command::new(llvm22("llvm-nm"))
                .arg("--defined-only")
                .arg(&bc),
        );
        for (name, kind) in [
            (LOOKUP, " T "),
            (MAP_P, " W "),
            (MAP_SIZE, " W "),
            (INDEX, " W "),
        ] {
            assert!(
                defined
                    .lines()
                    .any(|l| l.contains(kind) && l.ends_with(name)),
                "{relative}: {name} is not defined as{kind}in:\n{defined}"
            );
        }
    }
}

#[test]
fn prebuilt_ptx_assembles_and_declares_weak_globals() {
    for sm in ["sm_70", "sm_80", "sm_90"] {
        let ptx = prebuilt_ptx("nvptx64-nvidia-cuda", sm);
        // The whole lookup works in 64-bit registers: no table size or index is
        // truncated to 32 bits (LLVM's own device lookup truncates the count).
        let lookup = ptx_function(&ptx, LOOKUP);
        let narrow: Vec<&&str> = lookup
            .iter()
            .filter(|l| [".b32", ".u32", ".s32"].iter().any(|t| l.contains(t)))
            .collect();
        assert!(
            narrow.is_empty(),
            "{sm}: 32-bit operations in the lookup: {narrow:?}"
        );
        assert!(
            lookup.iter().any(|l| l.contains("setp.gt.u64"))
                && lookup.iter().any(|l| l.contains("selp.b64")),
            "{sm}: the lookup lost its unsigned compare/select search:\n{}",
            lookup.join("\n")
        );
        let cubin_bytes = read(&device_artifact(&format!(
            "nvptx64-nvidia-cuda/device_rtl.{sm}.cubin"
        )));
        let cubin = File::parse(&*cubin_bytes).expect("cubin is ELF");
        assert_globals_exported(
            &format!("{sm} cubin"),
            &cubin,
            cubin.symbols(),
            Sections::Writable,
        );
        assert!(
            cubin
                .symbols()
                .any(|s| s.name() == Ok(LOOKUP) && s.is_definition()),
            "{sm} cubin does not define {LOOKUP}"
        );
    }
}

/// The warp operations of the warp-cooperative variant.
const WARP_OPERATIONS: [&str; 4] = [
    "activemask.b32",
    "shfl.sync.idx.b32",
    "vote.sync.all.pred",
    "vote.sync.ballot.b32",
];

/// The default nvptx lookup has no warp operation: the warp-uniform fast path is only in
/// the opt-in variant until it has been measured on a GPU.
#[test]
fn default_ptx_has_no_warp_operations() {
    for sm in ["sm_70", "sm_80", "sm_90"] {
        let ptx = prebuilt_ptx("nvptx64-nvidia-cuda", sm);
        let lookup = ptx_function(&ptx, LOOKUP).join("\n");
        for op in WARP_OPERATIONS {
            assert!(!lookup.contains(op), "{sm}: default lookup uses {op}");
        }
    }
}

/// The `.sync` warp operations of a PTX function and the mask register each one names
/// (its last operand), with the register `activemask` wrote.
fn sync_masks(function: &[&str]) -> (Option<String>, Vec<(String, String)>) {
    let operands = |line: &str| -> Vec<String> {
        let rest = line
            .trim()
            .split_once(char::is_whitespace)
            .map_or("", |(_, r)| r);
        rest.trim_end_matches(';')
            .split(',')
            .map(|o| o.trim().to_string())
            .collect()
    };
    let mut active = None;
    let mut syncs = Vec::new();
    for line in function {
        let op = line.trim();
        if op.starts_with("activemask.b32") {
            active = operands(op).first().cloned();
        } else if op.starts_with("shfl.sync") || op.starts_with("vote.sync") {
            let mask = operands(op).last().cloned().unwrap_or_default();
            syncs.push((op.to_string(), mask));
        }
    }
    (active, syncs)
}

/// The variant's lookup: every warp operation is there, every `.sync` operation names
/// the mask `activemask` returned (never a constant full-warp mask, which would wait
/// forever for lanes that are not there), the scalar search is kept for divergent
/// pointers, and the globals are declared as in the default build.
#[test]
fn warp_cooperative_ptx_syncs_only_the_active_lanes() {
    for sm in ["sm_70", "sm_80", "sm_90"] {
        let ptx = prebuilt_ptx("nvptx64-nvidia-cuda/warp-cooperative", sm);
        let lookup = ptx_function(&ptx, LOOKUP);
        let text = lookup.join("\n");
        for op in WARP_OPERATIONS {
            assert!(
                text.contains(op),
                "{sm}: the variant's lookup lacks {op}:\n{text}"
            );
        }
        let (active, syncs) = sync_masks(&lookup);
        let active = active.expect("activemask writes a register");
        assert_eq!(
            syncs.len(),
            4,
            "{sm}: two shuffles and two votes: {syncs:?}"
        );
        for (op, mask) in &syncs {
            assert_eq!(mask, &active, "{sm}: `{op}` does not use the active mask");
        }
        assert!(
            text.contains("setp.gt.u64") && text.contains("selp.b64"),
            "{sm}: the variant lost the scalar search for divergent pointers"
        );
        let cubin_bytes = read(&device_artifact(&format!(
            "nvptx64-nvidia-cuda/warp-cooperative/device_rtl.{sm}.cubin"
        )));
        let cubin = File::parse(&*cubin_bytes).expect("cubin is ELF");
        assert_globals_exported(
            &format!("{sm} variant cubin"),
            &cubin,
            cubin.symbols(),
            Sections::Writable,
        );
    }
}

/// The variant linked into the test kernels the way a user links it: the globals stay
/// exported and loaded, the warp operations are inlined into every kernel, ptxas takes it.
#[test]
fn warp_cooperative_variant_links_into_kernels() {
    let bc = device_artifact("nvptx64-nvidia-cuda/warp-cooperative/device_rtl.bc");
    let dir = scratch("nvptx-sm90-warp-cooperative");
    let ptx_path = dir.join("lookup_kernel.ptx");
    clang_kernel(&NVPTX_SM90, &bc, "-S", &ptx_path);
    let ptx = String::from_utf8(read(&ptx_path)).expect("PTX is text");
    if let Err(problem) = check_ptx_globals(&ptx) {
        panic!("{problem}\n{ptx}");
    }
    for kernel in KERNELS {
        let body = ptx_function(&ptx, kernel);
        let text = body.join("\n");
        for g in GLOBALS {
            assert!(
                text.contains(&format!("[{g}]")),
                "kernel {kernel} does not load {g}"
            );
        }
        for op in WARP_OPERATIONS {
            assert!(text.contains(op), "kernel {kernel} lacks {op}");
        }
        let (active, syncs) = sync_masks(&body);
        let active = active.expect("activemask writes a register");
        for (op, mask) in &syncs {
            assert_eq!(
                mask, &active,
                "kernel {kernel}: `{op}` does not use the active mask"
            );
        }
    }
    let cubin_bytes = assemble_sm90(&ptx_path, &dir.join("lookup_kernel.cubin"));
    let cubin = File::parse(&*cubin_bytes).expect("cubin is ELF");
    assert_globals_exported(
        "sm_90 variant cubin",
        &cubin,
        cubin.symbols(),
        Sections::Writable,
    );
}

/// Every global is declared in the PTX in `.global` memory (writable, not `.const`) and
/// externally visible (`.weak` or `.visible`), so the plugin can find and write it by
/// name.
fn check_ptx_globals(ptx: &str) -> Result<(), String> {
    for g in GLOBALS {
        let decl = ptx
            .lines()
            .find(|l| l.contains(&format!(" {g}[")) && !l.trim_start().starts_with("//"))
            .ok_or_else(|| format!("{g} was removed from the linked PTX"))?;
        if !decl.contains(".global") || decl.contains(".const") {
            return Err(format!("{g} is not in writable .global memory: {decl}"));
        }
        if !(decl.starts_with(".weak") || decl.starts_with(".visible")) {
            return Err(format!("{g} is no longer externally visible: {decl}"));
        }
    }
    Ok(())
}

const NVPTX_SM90: [&str; 6] = [
    "--target=nvptx64-nvidia-cuda",
    "-march=sm_90",
    "-Xclang",
    "-target-feature",
    "-Xclang",
    "+ptx80",
];

#[test]
fn nvptx_sm90_link_keeps_table_globals_and_their_loads() {
    let bc = device_artifact("nvptx64-nvidia-cuda/device_rtl.bc");
    let dir = scratch("nvptx-sm90");
    let ptx_path = dir.join("lookup_kernel.ptx");
    clang_kernel(&NVPTX_SM90, &bc, "-S", &ptx_path);
    let ptx = String::from_utf8(read(&ptx_path)).expect("PTX is text");

    // Declared in global (writable, device-wide) memory, visible outside the module.
    if let Err(problem) = check_ptx_globals(&ptx) {
        panic!("{problem}\n{ptx}");
    }
    assert!(
        !ptx.contains(".extern"),
        "the link left unresolved symbols:\n{ptx}"
    );

    // Each kernel still reads the table globals at run time (not folded to null), and
    // runs the search: unsigned 64-bit key compares feeding selects.
    for kernel in KERNELS {
        let body = ptx_function(&ptx, kernel);
        for g in GLOBALS {
            assert!(
                body.iter()
                    .any(|l| l.trim_start().starts_with("ld.") && l.contains(&format!("[{g}]"))),
                "kernel {kernel} does not load {g}: the lookup was folded away\n{}",
                body.join("\n")
            );
        }
        assert!(
            body.iter()
                .any(|l| l.contains("setp.gt.u64") || l.contains("setp.le.u64")),
            "kernel {kernel} has no unsigned key compare"
        );
        assert!(
            body.iter().any(|l| l.contains("selp.b64")),
            "kernel {kernel} has no select"
        );
        // And the index path: all four words of the index header, loaded at run time,
        // and the bucket arithmetic (high half of a 64-bit product).
        for offset in ["", "+8", "+16", "+24"] {
            assert!(
                body.iter().any(|l| l.trim_start().starts_with("ld.")
                    && l.contains(&format!("[{INDEX}{offset}]"))),
                "kernel {kernel} does not load {INDEX}{offset}\n{}",
                body.join("\n")
            );
        }
        assert!(
            body.iter().any(|l| l.contains("mul.hi.u64")),
            "kernel {kernel} has no bucket arithmetic"
        );
    }

    // ptxas accepts it, and the cubin keeps the globals exported and writable. The
    // kernels reach them through addresses ptxas places in a constant bank, so the
    // references show as relocations against both symbols.
    let cubin_bytes = assemble_sm90(&ptx_path, &dir.join("lookup_kernel.cubin"));
    let cubin = File::parse(&*cubin_bytes).expect("cubin is ELF");
    assert_globals_exported("sm_90 cubin", &cubin, cubin.symbols(), Sections::Writable);
    let references = relocation_targets(&cubin);
    for g in GLOBALS {
        assert!(
            references
                .iter()
                .any(|(section, sym)| sym == g && !section.starts_with(".debug")),
            "cubin: no code or constant-bank relocation against {g}; relocations: {references:?}"
        );
    }
    for kernel in KERNELS {
        assert!(
            cubin
                .symbols()
                .any(|s| s.name() == Ok(kernel) && s.is_definition()),
            "sm_90 cubin: kernel {kernel} missing"
        );
    }
}

/// The relocatable AMDGPU object `bytes`, whose `.text` has a relocation against each of
/// the four globals (the lookup was not folded away).
fn assert_code_addresses_globals<'d>(bytes: &'d [u8], label: &str) -> File<'d> {
    let obj = File::parse(bytes).expect("object is ELF");
    let references = relocation_targets(&obj);
    for g in GLOBALS {
        assert!(
            references.contains(&(".text".to_string(), g.to_string())),
            "{label}: .text has no relocation against {g}: the lookup was folded away; \
             {references:?}"
        );
    }
    obj
}

/// The LLVM 16 bitcode beside each GPU build (build-device's rewrite of rustc's LLVM 22
/// IR, device-build/src/older_llvm.rs): clang-16's `-mlink-builtin-bitcode` reads it, and an
/// sm_90 image (ptxas accepts it) and a gfx90a object keep the lookup's loads of all four
/// globals, which stay exported; on NVPTX through the read-only cache, as with clang 22.
#[test]
fn clang_16_links_the_llvm16_bitcode_into_sm90_and_gfx90a_images() {
    older_clang_links_its_bitcode(16, &e2e_tests::tools::clang16());
}

/// The same for clang 17, which Debian 12 lacks: `cargo xtask debian13-programs --llvm
/// 17` (a step of `cargo xtask test`) writes the LLVM 17 bitcode with its root's tools
/// and runs this test with [`e2e_tests::tools::clang_in_root_env`] naming that root's
/// clang.
#[test]
#[ignore = "run by `cargo xtask debian13-programs --llvm 17`, with clang-17 in its Debian 13 root"]
fn clang_17_links_the_llvm17_bitcode_into_sm90_and_gfx90a_images() {
    older_clang_links_its_bitcode(17, &clang_in_root(17));
}

/// The same for clang 18 (`cargo xtask debian13-programs --llvm 18`).
#[test]
#[ignore = "run by `cargo xtask debian13-programs --llvm 18`, with clang-18 in its Debian 13 root"]
fn clang_18_links_the_llvm18_bitcode_into_sm90_and_gfx90a_images() {
    older_clang_links_its_bitcode(18, &clang_in_root(18));
}

/// The clang-`major` [`e2e_tests::tools::clang_in_root_env`] names.
fn clang_in_root(major: u32) -> PathBuf {
    let var = e2e_tests::tools::clang_in_root_env(major);
    std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!("{var} is not set: run `cargo xtask debian13-programs --llvm {major}`")
        })
}

/// clang `major` (`clang`) links `device_rtl.llvm<major>.bc` into the test kernel for
/// sm_90 and gfx90a, and both images keep the lookup's loads of the four globals.
fn older_clang_links_its_bitcode(major: u32, clang: &Path) {
    // clang 16 predates `nvptx_kernel`: the kernels are plain functions there.
    let quiet = "-Wno-unknown-attributes";
    let name = format!("device_rtl.llvm{major}.bc");
    let bc = device_artifact(&format!("nvptx64-nvidia-cuda/{name}"));
    let dir = scratch(&format!("nvptx-sm90-llvm{major}"));
    let ptx_path = dir.join("lookup_kernel.ptx");
    let sm90 = ["--target=nvptx64-nvidia-cuda", "-march=sm_90", quiet];
    clang_kernel_with(clang, &sm90, &bc, "-S", &ptx_path);
    let ptx = String::from_utf8(read(&ptx_path)).expect("PTX is text");
    if let Err(problem) = check_ptx_globals(&ptx) {
        panic!("clang-{major}: {problem}\n{ptx}");
    }
    for kernel in KERNELS {
        let body = ptx_function(&ptx, kernel);
        for g in GLOBALS {
            assert!(
                body.iter()
                    .any(|l| l.trim_start().starts_with("ld.global.nc")
                        && l.contains(&format!("[{g}"))),
                "clang-{major} {kernel}: no read-only load of {g}\n{}",
                body.join("\n")
            );
        }
    }
    assemble_sm90(&ptx_path, &dir.join("lookup_kernel.cubin"));

    let bc = device_artifact(&format!("amdgcn-amd-amdhsa/gfx90a/{name}"));
    let obj_path = scratch(&format!("amdgcn-gfx90a-llvm{major}")).join("lookup_kernel.o");
    let gfx90a = ["--target=amdgcn-amd-amdhsa", "-mcpu=gfx90a", quiet];
    clang_kernel_with(clang, &gfx90a, &bc, "-c", &obj_path);
    let obj_bytes = read(&obj_path);
    let label = format!("clang-{major} gfx90a");
    let obj = assert_code_addresses_globals(&obj_bytes, &label);
    for g in GLOBALS {
        assert!(
            obj.symbols()
                .any(|s| s.name() == Ok(g) && s.is_definition() && s.is_global()),
            "{label}: {g} is not an exported definition"
        );
    }
}

/// The check above is not vacuous: the same bitcode with its `llvm.used` list removed
/// (what the Rust statics look like without `#[used]`) gets its globals internalized
/// by `-mlink-builtin-bitcode`, and `check_ptx_globals` rejects the result.
#[test]
fn nvptx_check_catches_internalized_globals() {
    let bc = device_artifact("nvptx64-nvidia-cuda/device_rtl.bc");
    let dir = scratch("nvptx-without-used");
    let ll = stdout_of(Command::new(llvm22("llvm-dis")).arg(&bc).arg("-o").arg("-"));
    assert!(
        ll.contains("@llvm.used"),
        "the bitcode has no llvm.used list"
    );
    let stripped: String = ll
        .lines()
        // Drop the list, and the module summary (`^N = ...`) that refers to it.
        .filter(|l| !l.starts_with("@llvm.used") && !l.starts_with('^'))
        .map(|l| format!("{l}\n"))
        .collect();
    let ll_path = dir.join("without_used.ll");
    std::fs::write(&ll_path, stripped).expect("writing the stripped module");
    let stripped_bc = dir.join("without_used.bc");
    run_ok(
        Command::new(llvm22("llvm-as"))
            .arg(&ll_path)
            .arg("-o")
            .arg(&stripped_bc),
    );
    let ptx_path = dir.join("lookup_kernel.ptx");
    clang_kernel(&NVPTX_SM90, &stripped_bc, "-S", &ptx_path);
    let ptx = String::from_utf8(read(&ptx_path)).expect("PTX is text");
    assert!(
        check_ptx_globals(&ptx).is_err(),
        "globals survived without llvm.used, so the check proves nothing:\n{ptx}"
    );
}

/// The same control for the index global alone: dropped from `llvm.used` (the other two
/// kept), it is internalized, and the check names it. Its loads fold to the all-zero
/// initializer, i.e. "no index": the lookup would silently stay on the search.
#[test]
fn nvptx_check_catches_an_internalized_index_global() {
    let bc = device_artifact("nvptx64-nvidia-cuda/device_rtl.bc");
    let dir = scratch("nvptx-index-without-used");
    let ll = stdout_of(Command::new(llvm22("llvm-dis")).arg(&bc).arg("-o").arg("-"));
    let used = format!(
        "@llvm.used = appending global [4 x ptr] [ptr @{MAP_P}, ptr @{MAP_SIZE}, ptr @{HEAD}, \
         ptr @{INDEX}]"
    );
    assert!(ll.contains(&used), "unexpected llvm.used list in:\n{ll}");
    let without_index = ll
        .replace(
            &used,
            &format!(
                "@llvm.used = appending global [3 x ptr] [ptr @{MAP_P}, ptr @{MAP_SIZE}, \
                 ptr @{HEAD}]"
            ),
        )
        .lines()
        // The module summary (`^N = ...`) refers to the old list.
        .filter(|l| !l.starts_with('^'))
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    let ll_path = dir.join("without_index.ll");
    std::fs::write(&ll_path, without_index).expect("writing the edited module");
    let edited_bc = dir.join("without_index.bc");
    run_ok(
        Command::new(llvm22("llvm-as"))
            .arg(&ll_path)
            .arg("-o")
            .arg(&edited_bc),
    );
    let ptx_path = dir.join("lookup_kernel.ptx");
    clang_kernel(&NVPTX_SM90, &edited_bc, "-S", &ptx_path);
    let ptx = String::from_utf8(read(&ptx_path)).expect("PTX is text");
    let problem = check_ptx_globals(&ptx)
        .expect_err("the index global survived without llvm.used: the check proves nothing");
    assert!(problem.contains(INDEX), "{problem}");
}

#[test]
fn amdgcn_link_keeps_table_globals_and_their_loads() {
    for gfx in AMDGPU_ARCHES {
        let bc = device_artifact(&format!("amdgcn-amd-amdhsa/{gfx}/device_rtl.bc"));
        let dir = scratch(&format!("amdgcn-{gfx}"));
        let obj_path = dir.join("lookup_kernel.o");
        let mcpu = format!("-mcpu={gfx}");
        clang_kernel(&["--target=amdgcn-amd-amdhsa", &mcpu], &bc, "-c", &obj_path);
        let hsaco_path = dir.join("lookup_kernel.hsaco");
        run_ok(
            Command::new(llvm22("ld.lld"))
                .arg("-shared")
                .arg(&obj_path)
                .arg("-o")
                .arg(&hsaco_path),
        );

        // The kernels' code addresses both globals (in the relocatable object, before the
        // linker resolves anything).
        let obj_bytes = read(&obj_path);
        assert_code_addresses_globals(&obj_bytes, gfx);

        // The code object exports both, writable, and still loads them through the GOT
        // (dynamic relocations the loader resolves).
        let hsaco_bytes = read(&hsaco_path);
        let hsaco = File::parse(&*hsaco_bytes).expect("code object is ELF");
        assert_eq!(
            hsaco.kind(),
            object::ObjectKind::Dynamic,
            "{gfx}: not a shared object"
        );
        assert_globals_exported(
            &format!("{gfx} code object .symtab"),
            &hsaco,
            hsaco.symbols(),
            Sections::ReadOnlyToo,
        );
        assert_globals_exported(
            &format!("{gfx} code object .dynsym"),
            &hsaco,
            hsaco.dynamic_symbols(),
            Sections::ReadOnlyToo,
        );
        let dynamic = relocation_targets(&hsaco);
        for g in GLOBALS {
            assert!(
                dynamic.contains(&("<dynamic>".to_string(), g.to_string())),
                "{gfx}: code object has no dynamic relocation against {g}: {dynamic:?}"
            );
        }
        for kernel in KERNELS {
            assert!(
                hsaco
                    .symbols()
                    .any(|s| s.name() == Ok(kernel) && s.is_definition()),
                "{gfx}: kernel {kernel} missing from the code object"
            );
        }
        // And the disassembly has scalar loads that the GOT relocations feed.
        let disassembly = stdout_of(
            Command::new(llvm22("llvm-objdump"))
                .args(["-d", "-r"])
                .arg(&obj_path),
        );
        for g in GLOBALS {
            assert!(
                disassembly
                    .lines()
                    .any(|l| l.contains(g) && l.contains("GOTPCREL")),
                "{gfx}: no GOT-relative access to {g} in the kernel code:\n{disassembly}"
            );
        }
    }
}

/// Build and run tests/fixtures/device/host_lookup.c against the x86_64 library.
fn run_host_lookup(test: &str, extra_args: &[&str]) {
    let lib = device_artifact("x86_64-unknown-linux-gnu/libdevice_rtl.a");
    let dir = scratch(test);
    let exe = dir.join("host_lookup");
    run_ok(
        Command::new(llvm22("clang"))
            .args(["-O2", "-Wall", "-Werror"])
            .args(extra_args)
            .arg(fixture("host_lookup.c"))
            .arg(&lib)
            .arg("-o")
            .arg(&exe),
    );
    let stdout = stdout_of(&mut Command::new(&exe));
    let passed: u32 = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("host_lookup: ")?
                .strip_suffix(" checks passed")
        })
        .unwrap_or_else(|| panic!("unexpected output:\n{stdout}"))
        .parse()
        .expect("a check count");
    // 1 default + 6 hits + 8 misses + 2 empty/null + 1 call + 2 per big entry.
    assert_eq!(passed, 18 + 200_000, "{stdout}");
}

#[test]
fn x86_64_library_translates_from_c() {
    run_host_lookup("x86_64-extern-globals", &[]);
}

#[test]
fn x86_64_library_weak_globals_merge_with_a_front_end_definition() {
    run_host_lookup("x86_64-weak-globals", &["-DDEFINE_WEAK_GLOBALS"]);
}

#[test]
fn x86_64_library_links_into_a_shared_object_without_undefined_symbols() {
    let lib = device_artifact("x86_64-unknown-linux-gnu/libdevice_rtl.a");
    let dir = scratch("x86_64-shared");
    let so = dir.join("libdevice_image.so");
    // -z defs: every reference must resolve against the library itself or libc.
    run_ok(
        Command::new(llvm22("clang"))
            .args(["-shared", "-fPIC", "-fuse-ld=lld", "-Wl,-z,defs"])
            .arg(format!("-Wl,--undefined={LOOKUP}"))
            .arg(&lib)
            .arg("-o")
            .arg(&so),
    );
    let bytes = read(&so);
    let file = File::parse(&*bytes).expect("shared object is ELF");
    assert_globals_exported(
        "x86_64 shared object",
        &file,
        file.dynamic_symbols(),
        Sections::Writable,
    );
    let lookup = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(LOOKUP))
        .expect("the lookup is exported");
    assert!(lookup.is_definition() && lookup.is_global());
    for sym in file.dynamic_symbols().filter(|s| s.is_undefined()) {
        let name = sym.name().unwrap_or_default();
        assert!(
            ["memcpy", "memmove", "memset", "memcmp", "bcmp", ""].contains(&name)
                || name.starts_with("__cxa_finalize")
                || name.starts_with("_ITM_")
                || name.starts_with("__gmon_start__"),
            "the shared object needs {name} from outside libc"
        );
    }
}

/// The lines of the blocks of a PTX function that lie in a loop: LLVM's NVPTX printer
/// comments each block label inside a loop (`// in Loop: ...`, `// =>This Inner Loop
/// Header: ...`).
fn ptx_loop_lines<'a>(function: &[&'a str]) -> Vec<&'a str> {
    let mut in_loop = false;
    let mut lines = Vec::new();
    for line in function {
        if line.starts_with("$L__BB") {
            in_loop = line.contains("Loop");
            continue;
        }
        if in_loop {
            lines.push(*line);
        }
    }
    lines
}

/// What a loop of `lookup_bench` reads that it should read once, before the loop: any
/// load naming one of the lookup's globals, and any volatile load.
fn loop_loads_of_lookup_globals(ptx: &str) -> Vec<String> {
    let kernel = ptx_function(ptx, "lookup_bench");
    let in_loop = ptx_loop_lines(&kernel);
    assert!(
        !in_loop.is_empty(),
        "lookup_bench has no loop in its PTX:\n{}",
        kernel.join("\n")
    );
    in_loop
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with("ld."))
        .filter(|l| l.starts_with("ld.volatile") || GLOBALS.iter().any(|g| l.contains(g)))
        .map(str::to_owned)
        .collect()
}

/// The GPU lookup benchmark's kernel (a loop that translates a pointer and calls through
/// it) linked with `bitcode` for sm_90, as PTX.
fn bench_kernel_ptx(bitcode: &Path, dir: &Path) -> String {
    let ptx_path = dir.join("gpu_lookup.ptx");
    run_ok(
        Command::new(llvm22("clang"))
            .args(NVPTX_SM90)
            .args(["-nogpulib", "-O2", "-S", "-DLOOKUP_OURS"])
            .arg(e2e_tests::paths::fixture("bench/gpu_lookup.c"))
            .args(["-Xclang", "-mlink-builtin-bitcode", "-Xclang"])
            .arg(bitcode)
            .arg("-o")
            .arg(&ptx_path),
    );
    String::from_utf8(read(&ptx_path)).expect("PTX is text")
}

/// A kernel that translates pointers in a loop, linked with the installed nvptx64
/// bitcode, loads the lookup's globals (head, index header, table pointer and size) once,
/// before the loop: they are constant to device code (device-build's `read_only_globals::mark`),
/// so the compiler hoists them over the loop's indirect call, which may write any
/// writable memory. No load in the loop names them, and none is volatile. The control:
/// the same bitcode with the globals left writable, as rustc emits them, keeps them in
/// the loop.
#[test]
fn a_translating_loop_loads_the_lookup_globals_once_before_it() {
    let installed = require_file(
        target_dir().join("install/lib/omptarget-indirect/nvptx64-nvidia-cuda/device_rtl.bc"),
        "`cargo xtask install --prefix target/install` (or `cargo xtask test`)",
    );
    let dir = scratch("nvptx-loop-loads");
    let in_loop = loop_loads_of_lookup_globals(&bench_kernel_ptx(&installed, &dir));
    assert!(
        in_loop.is_empty(),
        "the loop loads the lookup's globals on every call:\n{}",
        in_loop.join("\n")
    );

    let ll = stdout_of(
        Command::new(llvm22("llvm-dis"))
            .arg(&installed)
            .arg("-o")
            .arg("-"),
    );
    let writable: String = ll
        .lines()
        .filter(|l| !l.starts_with('^'))
        .map(|l| {
            let global = GLOBALS
                .iter()
                .any(|g| l.starts_with(&format!("@{g} = weak constant ")));
            let line = if global {
                l.replacen("weak constant", "weak global", 1)
            } else {
                l.to_string()
            };
            format!("{line}\n")
        })
        .collect();
    assert_ne!(writable, ll, "no global was marked constant");
    let writable_ll = dir.join("writable.ll");
    std::fs::write(&writable_ll, writable).unwrap();
    let writable_bc = dir.join("writable.bc");
    run_ok(
        Command::new(llvm22("llvm-as"))
            .arg(&writable_ll)
            .arg("-o")
            .arg(&writable_bc),
    );
    let control_dir = dir.join("control");
    std::fs::create_dir_all(&control_dir).unwrap();
    let in_loop = loop_loads_of_lookup_globals(&bench_kernel_ptx(&writable_bc, &control_dir));
    assert!(
        !in_loop.is_empty(),
        "with writable globals the loop still loads none of them: the check proves nothing"
    );
}
