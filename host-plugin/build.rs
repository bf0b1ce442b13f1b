// libomptarget must never unload the plugin while the program runs: LLVM's own plugins
// are linked `-z nodelete` (without it `offloading/dynamic_module_load.c` crashes at exit).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
