//! The soname `libcuda.so`: a process that dlopens the stand-in by its full path first
//! makes every later `dlopen("libcuda.so")` (cudarc's) return it, because glibc matches
//! loaded objects by soname.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so");
    println!("cargo:rerun-if-changed=build.rs");
}
