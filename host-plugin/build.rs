// libomptarget must never unload the plugin while the program runs: LLVM's own plugins
// are linked `-z nodelete` (without it `offloading/dynamic_module_load.c` crashes at exit).
//
// `-Bsymbolic`: libomptarget dlopens every plugin RTLD_GLOBAL, and our plugin files are
// copies of one library exporting the same `__tgt_rtl_*` names. Without it, a call from
// one of our entry points to another (is_valid_binary_info -> is_valid_binary) goes
// through the GOT and binds to the copy loaded first: the cuda copy then answered with the
// x86_64 copy's is_valid_binary and refused every cubin whenever the x86_64 plugin was
// loaded before it. Each copy now binds its own references to itself.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
