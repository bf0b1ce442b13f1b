//! Compiles the AST plugin glue (glue/ast_plugin.cpp) against LLVM/clang 16's headers
//! (Debian's llvm-16-dev and libclang-16-dev) and links it whole into the shared library,
//! with libclang-cpp 16, the library clang-16 itself runs on.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let prefix = std::env::var_os("LLVM_SYS_160_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/llvm-16"));
    println!("cargo:rerun-if-env-changed=LLVM_SYS_160_PREFIX");
    println!("cargo:rerun-if-changed=glue/ast_plugin.cpp");
    let config = prefix.join("bin/llvm-config");
    let query = |arg: &str| -> String {
        let out = Command::new(&config).arg(arg).output().unwrap_or_else(|e| {
            panic!(
                "{} not found ({e}): install llvm-16-dev libclang-16-dev \
                     (`cargo xtask test` does), or set LLVM_SYS_160_PREFIX",
                config.display()
            )
        });
        String::from_utf8(out.stdout)
            .expect("llvm-config prints UTF-8")
            .trim()
            .to_string()
    };
    let include = PathBuf::from(query("--includedir"));
    let libdir = query("--libdir");
    assert!(
        include
            .join("clang/Frontend/FrontendPluginRegistry.h")
            .is_file(),
        "clang 16 headers missing under {}: install libclang-16-dev",
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
    println!("cargo:rustc-link-lib=dylib=clang-cpp");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
