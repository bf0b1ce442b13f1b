//! A real cubin for the tests: a small C source with what the project's images hold,
//! linked as clang 16's offload link does it (clang-22 to PTX, `ptxas -c`, nvlink).

use std::path::{Path, PathBuf};
use std::process::Command;
use test_support::tools::{llvm22, ptxas};

/// Device functions, a holder of a function's address, a vtable-like array of them,
/// a holder pointing into it, data with a pointer into it, zeroed data and shared
/// memory: what the project's images hold.
const SOURCE: &str = r#"
__attribute__((noinline)) int f1(int x) { return x + 1; }
__attribute__((noinline)) int f2(int x) { return x * 2; }
typedef int (*fp)(int);
__attribute__((used)) fp holder = f1;
__attribute__((used)) fp vtable[4] = {0, 0, f1, f2};
__attribute__((used)) fp *vholder = &vtable[2];
__attribute__((used)) int data[4] = {1, 2, 3, 4};
__attribute__((used)) int *dptr = &data[1];
__attribute__((used)) int zeroed[100];
__attribute__((address_space(3))) int tile[64];
__attribute__((nvptx_kernel)) void kern(int *out, fp g) {
  tile[out[0] & 63] = out[1];
  *out = holder(3) + vtable[3](1) + g(2) + data[0] + zeroed[out[2] & 63] + tile[out[3] & 63];
}
__attribute__((nvptx_kernel)) void plain(int *out) { *out = 1; }
"#;

fn run(cmd: &mut Command) {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// nvlink beside ptxas (the CUDA wheel and installations keep them together).
fn nvlink(ptxas: &Path) -> PathBuf {
    let beside = ptxas.with_file_name("nvlink");
    assert!(beside.is_file(), "no nvlink beside {}", ptxas.display());
    beside
}

/// SOURCE linked as clang 16's offload link does it: clang-22 to PTX, `ptxas -c`,
/// nvlink. Built once per test process.
pub fn linked_cubin() -> &'static [u8] {
    static CUBIN: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    CUBIN.get_or_init(|| {
        let dir = test_support::workspace::target_dir()
            .join("cuda-standin-tests")
            .join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let (c, ptx, obj, cubin) = (
            dir.join("t.c"),
            dir.join("t.ptx"),
            dir.join("t.o"),
            dir.join("t.cubin"),
        );
        std::fs::write(&c, SOURCE).unwrap();
        run(Command::new(llvm22("clang"))
            .args(["--target=nvptx64-nvidia-cuda", "-march=sm_90"])
            .args(["-Xclang", "-target-feature", "-Xclang", "+ptx80"])
            .args(["-nogpulib", "-O2", "-S"])
            .arg(&c)
            .arg("-o")
            .arg(&ptx));
        let ptxas = ptxas();
        run(Command::new(&ptxas)
            .args(["-c", "-arch=sm_90"])
            .arg(&ptx)
            .arg("-o")
            .arg(&obj));
        run(Command::new(nvlink(&ptxas))
            .arg("-arch=sm_90")
            .arg(&obj)
            .arg("-o")
            .arg(&cubin));
        let bytes = std::fs::read(&cubin).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    })
}

/// `cubin` (sm_90) as the only member of a fatbinary made by CUDA's `fatbinary` tool
/// (beside ptxas), compressed or not.
pub fn fatbinary_of(cubin: &[u8], compressed: bool) -> Vec<u8> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = test_support::workspace::target_dir()
        .join("cuda-standin-tests")
        .join(format!("{}-fatbin-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("in.cubin"), dir.join("out.fatbin"));
    std::fs::write(&input, cubin).unwrap();
    let tool = ptxas().with_file_name("fatbinary");
    assert!(tool.is_file(), "no fatbinary beside ptxas");
    let mut cmd = Command::new(tool);
    cmd.arg(format!("--create={}", output.display()))
        .arg(format!("--image3=kind=elf,sm=90,file={}", input.display()));
    if compressed {
        cmd.arg("--compress-all");
    }
    run(&mut cmd);
    let bytes = std::fs::read(&output).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}
