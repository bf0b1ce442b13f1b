//! The CUDA folder clang 16 is given for nvptx64 compiles (`--cuda-path`), and the
//! arguments that name it: the install's self-tests and the test programs use the same.

use crate::util;
use anyhow::{Context, Result};
use std::path::PathBuf;
use test_support::cuda;

/// A `--cuda-path` for clang 16: the CUDA installation ptxas comes from when it has
/// `include/cuda.h`, else a folder of links into the `nvidia-cuda-nvcc` wheel (ptxas,
/// nvlink, libdevice) with a `cuda.h` that states a version clang 16 accepts (the same
/// folder the tests build, from test-support).
pub fn cuda_path_for_clang16() -> Result<PathBuf> {
    let ptxas = util::ptxas()?;
    if let Some(installation) = cuda::complete_installation(&ptxas) {
        return Ok(installation);
    }
    let folder = util::target_dir().join("nvptx/cuda-for-clang16");
    cuda::folder_for_clang(&ptxas, &folder)
        .with_context(|| format!("making the --cuda-path folder {}", folder.display()))
}

/// clang-16's arguments for an `sm` device image (the CUDA installation it wants).
pub fn cuda_args(sm: &str) -> Result<Vec<String>> {
    let cuda = cuda_path_for_clang16()?;
    Ok(vec![
        format!("--offload-arch={sm}"),
        format!("--cuda-path={}", cuda.display()),
        "-Wno-unknown-cuda-version".to_string(),
    ])
}
