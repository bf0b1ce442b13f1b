//! The `--cuda-path` folder clang needs to compile OpenMP for NVIDIA GPUs on a machine
//! whose CUDA is only the `nvidia-cuda-nvcc` PyPI wheel.
//!
//! clang reads the CUDA version from `include/cuda.h` and runs `bin/ptxas` and
//! `bin/nvlink`; it also wants `nvvm/libdevice`. The wheel has the tools but not that
//! layout, so the folder links them and states CUDA 12.8 ([`CUDA_VERSION`]): past what
//! clang 16 knows (a warning, silenced by `-Wno-unknown-cuda-version`, and then its
//! newest PTX ISA), and a version clang 22 accepts for sm_90.

use crate::tools::installation_of;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The `CUDA_VERSION` the folder's `include/cuda.h` defines (12.8).
pub const CUDA_VERSION: u32 = 12080;

/// The CUDA installation `ptxas` belongs to (`<root>/bin/ptxas`), when it is complete
/// enough to be a `--cuda-path` as it is: it has `include/cuda.h` and `nvvm/libdevice`.
pub fn complete_installation(ptxas: &Path) -> Option<PathBuf> {
    let root = installation_of(ptxas)?;
    (root.join("include/cuda.h").is_file() && root.join("nvvm/libdevice").is_dir())
        .then(|| root.to_path_buf())
}

/// Makes `folder` (anew) a `--cuda-path` for clang: `bin/ptxas`, `bin/nvlink` and
/// `nvvm/libdevice` linked from the installation `ptxas` belongs to, and an
/// `include/cuda.h` defining [`CUDA_VERSION`]. Returns `folder`.
pub fn folder_for_clang(ptxas: &Path, folder: &Path) -> io::Result<PathBuf> {
    let root = installation_of(ptxas)
        .ok_or_else(|| io::Error::other(format!("{} is not in a bin/ folder", ptxas.display())))?;
    if folder.exists() {
        fs::remove_dir_all(folder)?;
    }
    for sub in ["bin", "include", "nvvm"] {
        fs::create_dir_all(folder.join(sub))?;
    }
    for linked in ["bin/ptxas", "bin/nvlink", "nvvm/libdevice"] {
        let from = root.join(linked);
        if !from.exists() {
            return Err(io::Error::other(format!("{} is missing", from.display())));
        }
        let to = folder.join(linked);
        std::os::unix::fs::symlink(&from, &to).map_err(|e| {
            io::Error::other(format!(
                "linking {} to {}: {e}",
                to.display(),
                from.display()
            ))
        })?;
    }
    fs::write(
        folder.join("include/cuda.h"),
        format!("#define CUDA_VERSION {CUDA_VERSION}\n"),
    )?;
    Ok(folder.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CUDA-like tree under a fresh folder of the target dir: `bin/ptxas`,
    /// `bin/nvlink`, `nvvm/libdevice/`, and `include/cuda.h` when `with_header`.
    fn fake_installation(name: &str, with_header: bool) -> PathBuf {
        let root = crate::workspace::target_dir()
            .join("test-support")
            .join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for sub in ["bin", "include", "nvvm/libdevice"] {
            fs::create_dir_all(root.join(sub)).unwrap();
        }
        for tool in ["bin/ptxas", "bin/nvlink"] {
            fs::write(root.join(tool), "#!/bin/sh\n").unwrap();
        }
        if with_header {
            fs::write(root.join("include/cuda.h"), "#define CUDA_VERSION 13050\n").unwrap();
        }
        root
    }

    #[test]
    fn the_folder_links_the_tools_and_states_a_version() {
        let root = fake_installation("wheel", false);
        let ptxas = root.join("bin/ptxas");
        assert_eq!(complete_installation(&ptxas), None);
        let folder = root.with_extension("cuda");
        fs::create_dir_all(folder.join("stale")).unwrap();
        assert_eq!(folder_for_clang(&ptxas, &folder).unwrap(), folder);
        for linked in ["bin/ptxas", "bin/nvlink", "nvvm/libdevice"] {
            assert_eq!(
                fs::read_link(folder.join(linked)).unwrap(),
                root.join(linked)
            );
        }
        assert_eq!(
            fs::read_to_string(folder.join("include/cuda.h")).unwrap(),
            "#define CUDA_VERSION 12080\n"
        );
        assert!(!folder.join("stale").exists(), "the folder is made anew");
        fs::remove_dir_all(&folder).unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_complete_installation_is_used_as_it_is() {
        let root = fake_installation("installation", true);
        assert_eq!(
            complete_installation(&root.join("bin/ptxas")),
            Some(root.clone())
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_tool_the_folder_needs_must_exist() {
        let root = fake_installation("no-nvlink", false);
        fs::remove_file(root.join("bin/nvlink")).unwrap();
        let folder = root.with_extension("cuda");
        let e = folder_for_clang(&root.join("bin/ptxas"), &folder).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{} is missing", root.join("bin/nvlink").display())
        );
        let _ = fs::remove_dir_all(&folder);
        fs::remove_dir_all(&root).unwrap();
    }
}
