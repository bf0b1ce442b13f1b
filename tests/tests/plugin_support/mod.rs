//! Helpers of the plugin tests: device-rtl's x86_64 library, the built plugin files,
//! and device images and programs compiled by clang 16 against them.
#![allow(dead_code)]

use e2e_tests::paths::{fixture, require_file, target_dir};
use e2e_tests::plugin::built_plugin_dir;
use e2e_tests::process::run_ok;
use e2e_tests::tools::clang16;
use std::path::{Path, PathBuf};
use std::process::Command;

/// device-rtl's x86_64 static library, built by `cargo xtask build-device`.
pub fn device_staticlib() -> PathBuf {
    require_file(
        target_dir().join("device/x86_64-unknown-linux-gnu/libdevice_rtl.a"),
        "`cargo xtask build-device` (or `cargo xtask test`)",
    )
}

/// target/plugin/, filled by `cargo xtask build-plugin`.
pub fn plugin_dir() -> PathBuf {
    let d = built_plugin_dir();
    assert!(
        d.join("libomptarget.rtl.x86_64.so").is_file(),
        "{} has no plugins: run `cargo xtask build-plugin` (or `cargo xtask test`) first",
        d.display()
    );
    d
}

/// A fresh, empty directory for one caller under target/plugin-tests/ (unique per
/// call: see `e2e_tests::paths::scratch`).
pub fn scratch(name: &str) -> PathBuf {
    e2e_tests::paths::scratch("plugin-tests", name)
}

/// tests/fixtures/plugin/<name>.c built into an x86-64 shared object, the host
/// backend's image format; with `with_device_rtl` it links device-rtl's lookup.
pub fn host_image(name: &str, with_device_rtl: bool) -> Vec<u8> {
    let dir = scratch(&format!("image-{name}"));
    let so = dir.join(format!("{name}.so"));
    let mut cmd = Command::new(clang16());
    cmd.args(["-O1", "-shared", "-fPIC"])
        .arg(fixture(&format!("plugin/{name}.c")));
    if with_device_rtl {
        cmd.arg("-Wl,--undefined=__kmpc_target_translate_fptr")
            .arg(device_staticlib());
    }
    run_ok(cmd.arg("-o").arg(&so));
    std::fs::read(&so).expect("read the built image")
}

/// A host image (x86-64 shared object, device-rtl linked) exporting `n` functions
/// `f0` .. `f<n-1>`, `f<i>` returning `i`: for loads of many entries.
pub fn many_functions_image(n: usize) -> Vec<u8> {
    let dir = scratch(&format!("image-many-{n}"));
    let source = dir.join("many.c");
    let text: String = (0..n)
        .map(|i| format!("int f{i}(void) {{ return {i}; }}\n"))
        .collect();
    std::fs::write(&source, text).expect("write the generated source");
    let so = dir.join("many.so");
    run_ok(
        Command::new(clang16())
            .args(["-O0", "-shared", "-fPIC"])
            .arg(&source)
            .arg("-Wl,--undefined=__kmpc_target_translate_fptr")
            .arg(device_staticlib())
            .arg("-o")
            .arg(&so),
    );
    std::fs::read(&so).expect("read the built image")
}

/// Compile an OpenMP program for the x86_64 offload device; with `with_device_rtl` its
/// device image links device-rtl.
pub fn compile_offload_program(source: &Path, output: &Path, with_device_rtl: bool) {
    compile_offload_sources(&[source], output, with_device_rtl, &[]);
}

/// [`compile_offload_program`] for several translation units and extra clang arguments.
pub fn compile_offload_sources(
    sources: &[&Path],
    output: &Path,
    with_device_rtl: bool,
    extra_args: &[&str],
) {
    let library = with_device_rtl.then(device_staticlib);
    e2e_tests::compile::compile_offload_sources(sources, output, library.as_deref(), extra_args);
}

/// The x86_64 device image clang 16 embedded in an offloading program (the bytes
/// libomptarget hands the plugin).
pub fn device_image_of(program: &Path) -> Vec<u8> {
    let bytes = std::fs::read(program).expect("read the program");
    let images = offload_formats::image::find_images(&bytes).expect("read its offload sections");
    let x86: Vec<_> = images
        .iter()
        .filter(|i| i.triple.starts_with("x86_64"))
        .collect();
    assert_eq!(x86.len(), 1, "{}: {images:?}", program.display());
    x86[0].data.to_vec()
}

/// What an image's ELF symbol tables say about a name: whether `.dynsym` defines it, and
/// each `.symtab` definition as (address, binding, the STT_FILE name before it).
pub struct NameInImage {
    pub in_dynsym: bool,
    pub in_symtab: Vec<(u64, u8, Option<String>)>,
}

/// Read from the image with the `object` crate, independently of the plugin.
pub fn name_in_image(image: &[u8], name: &str) -> NameInImage {
    use object::read::elf::{ElfFile64, Sym};
    use object::{elf, LittleEndian as LE};
    let file = ElfFile64::<LE>::parse(image).expect("an ELF64 image");
    let sections = file.elf_section_table();
    let table = |kind| sections.symbols(LE, image, kind).expect("symbol table");
    let dynsym = table(elf::SHT_DYNSYM);
    let in_dynsym = dynsym.symbols().iter().any(|s| {
        s.st_shndx(LE) != elf::SHN_UNDEF && s.name(LE, dynsym.strings()) == Ok(name.as_bytes())
    });
    let symtab = table(elf::SHT_SYMTAB);
    let mut file_name = None;
    let mut in_symtab = Vec::new();
    for s in symtab.symbols() {
        let n = s.name(LE, symtab.strings()).unwrap_or_default();
        if s.st_type() == elf::STT_FILE {
            file_name = (!n.is_empty()).then(|| String::from_utf8_lossy(n).into_owned());
        } else if n == name.as_bytes() && s.st_shndx(LE) != elf::SHN_UNDEF {
            in_symtab.push((s.st_value(LE), s.st_bind(), file_name.clone()));
        }
    }
    NameInImage {
        in_dynsym,
        in_symtab,
    }
}
