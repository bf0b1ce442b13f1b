//! Compiles the AST plugin glue (glue/ast_plugin.cpp) against the headers of the LLVM and
//! clang the crate is built for (feature `llvm16`, `llvm17` or `llvm18`: Debian's
//! llvm-N-dev and libclang-N-dev) and links it whole into the shared library, with
//! libclang-cpp N, the library clang-N itself runs on.
use std::path::PathBuf;
use std::process::Command;

/// The LLVM major versions the crate can be built for, each behind feature `llvmN`.
const SUPPORTED: [u32; 3] = [16, 17, 18];

/// The one version the features select (more than one is a mistake: a pass plugin is
/// bound to a single LLVM's C++ API).
fn selected_major() -> u32 {
    let selected: Vec<u32> = SUPPORTED
        .into_iter()
        .filter(|m| std::env::var_os(format!("CARGO_FEATURE_LLVM{m}")).is_some())
        .collect();
    match selected[..] {
        [major] => major,
        [] => panic!("select the LLVM version with one of the features llvm16, llvm17, llvm18"),
        _ => panic!(
            "features {selected:?} select several LLVM versions: build with \
             --no-default-features --features llvmN for N other than 16"
        ),
    }
}

fn main() {
    let major = selected_major();
    // The variable llvm-sys N reads too (LLVM_SYS_160_PREFIX, _170_, _180_), so one
    // setting serves both halves of the library.
    let prefix_var = format!("LLVM_SYS_{major}0_PREFIX");
    let prefix = std::env::var_os(&prefix_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/usr/lib/llvm-{major}")));
    println!("cargo:rerun-if-env-changed={prefix_var}");
    println!("cargo:rerun-if-changed=glue/ast_plugin.cpp");
    let packages = format!("llvm-{major}-dev libclang-{major}-dev libclang-cpp{major}-dev");
    let config = prefix.join("bin/llvm-config");
    let query = |arg: &str| -> String {
        let out = Command::new(&config).arg(arg).output().unwrap_or_else(|e| {
            panic!(
                "{} not found ({e}): install {packages} (`cargo xtask install --llvm \
                 {major}` does), or set {prefix_var}",
                config.display()
            )
        });
        String::from_utf8(out.stdout)
            .expect("llvm-config prints UTF-8")
            .trim()
            .to_string()
    };
    let version = query("--version");
    assert!(
        version.split('.').next() == Some(&major.to_string()),
        "{} is LLVM {version}, not {major}: set {prefix_var} to LLVM {major}'s prefix",
        config.display()
    );
    let include = PathBuf::from(query("--includedir"));
    let libdir = query("--libdir");
    assert!(
        include
            .join("clang/Frontend/FrontendPluginRegistry.h")
            .is_file(),
        "clang {major} headers missing under {}: install libclang-{major}-dev",
        include.display()
    );
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        // -isystem: clang's own headers are not ours to warn about.
        .flag("-isystem")
        .flag(include.to_str().expect("UTF-8 include path"))
        .flag("-fno-exceptions")
        .flag("-fvisibility-inlines-hidden")
        .define("_GNU_SOURCE", None)
        .define("__STDC_CONSTANT_MACROS", None)
        .define("__STDC_FORMAT_MACROS", None)
        .define("__STDC_LIMIT_MACROS", None)
        .file("glue/ast_plugin.cpp")
        .cargo_metadata(false)
        .compile("omp_indirect_ast_glue");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rustc-link-search=native={out}");
    // Whole archive: the registration is a static object nothing else references.
    println!("cargo:rustc-link-lib=static:+whole-archive=omp_indirect_ast_glue");
    println!("cargo:rustc-link-search=native={libdir}");
    provide_libllvm_link_name(&libdir, major, &out);
    println!("cargo:rustc-link-lib=dylib=clang-cpp");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

/// llvm-plugin 0.6 links every plugin with `-lLLVM`, but Debian's LLVM 18 has no
/// `libLLVM.so` link name (16 and 17 have one): only `libLLVM-18.so`. Where the link
/// name is missing, one in OUT_DIR (on the link search path above) points at
/// `libLLVM-<major>.so`: the same library, so the plugin records the soname clang-N
/// itself runs on.
fn provide_libllvm_link_name(libdir: &str, major: u32, out: &str) {
    let libdir = std::path::Path::new(libdir);
    if libdir.join("libLLVM.so").exists() {
        return;
    }
    let versioned = libdir.join(format!("libLLVM-{major}.so"));
    assert!(
        versioned.exists(),
        "neither libLLVM.so nor {} exists: install llvm-{major}-dev",
        versioned.display()
    );
    let link = std::path::Path::new(out).join("libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&versioned, &link)
        .unwrap_or_else(|e| panic!("linking {} to {}: {e}", link.display(), versioned.display()));
}
