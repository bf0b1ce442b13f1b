//! The Debian package of one LLVM version: the install tree at
//! `/usr/lib/omptarget-indirect/llvmN/`, the doctor on PATH as
//! `omptarget-indirect-doctor-N`, the copyright file (machine-readable, with the LLVM
//! exception's text; Apache-2.0's own text is in /usr/share/common-licenses), the
//! changelog and the third-party notices, lintian overrides for what lintian cannot know
//! (GPU code objects are not host binaries), md5sums, and a control file whose
//! dependencies are dpkg-shlibdeps' (the C libraries our binaries link) plus
//! [`llvm_dependencies`] (the compiler and tools the configs use, the libomptarget they
//! need); lld-N (AMD GPU images) is suggested.
//!
//! Debug info is left out (Debian ships it in separate packages); the tarball keeps it.
//! `lintian` must report no error; the warnings it gives are printed.

use super::{Release, VERSION};
use crate::util;
use anyhow::{bail, ensure, Context, Result};
use install_layout::DOCTOR;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Debian's tools for building and checking a package.
const TOOLS: &[&str] = &["dpkg-dev"];

/// The newest glibc whose symbols a package may need: Ubuntu 24.04's (2.39), so that the
/// LLVM 18 package built on Debian 13 installs there too.
const NEWEST_GLIBC: (u32, u32) = (2, 39);

/// The lintian tags overridden, where, and why (each a fact lintian cannot see): the
/// path below the install's prefix, the tags, what the tag's hint says before the path
/// (`*`: any RUNPATH), the reason.
const OVERRIDES: &[(&str, &[&str], &str, &str)] = &[
    (
        "libexec/omptarget-indirect/self-test/*",
        &["custom-library-search-path"],
        "* ",
        "the doctor's self-test programs are built as a user's are: clang's -fopenmp RUNPATH names LLVM's library folder, where libomptarget is",
    ),
    (
        "lib/omptarget-indirect/nvptx64-nvidia-cuda/*",
        &["binary-from-other-architecture", "unstripped-binary-or-object"],
        "",
        "NVIDIA GPU code (cubins): loaded by the CUDA driver, not the host; their symbols are the lookup's interface",
    ),
    (
        "lib/omptarget-indirect/amdgcn-amd-amdhsa/*",
        &["binary-from-other-architecture"],
        "",
        "AMD GPU code objects: linked into GPU images, not run by the host",
    ),
    (
        "lib/omptarget-indirect/libomptarget.devicertl.a",
        &["no-code-sections"],
        "",
        "offload objects: the device code is in their .llvm.offloading sections, which clang's linker wrapper reads",
    ),
];

/// Build `release`'s .deb from the file tree `root` (the install already in it) into
/// `out`. Returns its path.
pub fn build(release: Release, root: &Path, notices: &Path, out: &Path) -> Result<PathBuf> {
    util::ensure_debian_packages(TOOLS)?;
    let prefix = super::host_path(root, &release.prefix());
    remove_debug_info(&prefix)?;
    strip_host_binaries(root)?;
    write_docs(release, root, notices)?;
    link_doctor(release, root)?;
    write_overrides(release, root)?;
    normalise_permissions(root)?;
    let depends = depends(release, root)?;
    write_control(release, root, &depends)?;
    write_md5sums(root)?;
    let deb = out.join(release.deb_file());
    let sh = Shell::new()?;
    cmd!(sh, "dpkg-deb --root-owner-group -Zxz --build {root} {deb}")
        .run()
        .context("dpkg-deb")?;
    Ok(deb)
}

/// The `.debug` folders the install splits debug info into.
fn remove_debug_info(prefix: &Path) -> Result<()> {
    for dir in util::paths_below(prefix, |_| false)? {
        if dir.is_dir() && dir.file_name().is_some_and(|n| n == ".debug") {
            fs::remove_dir_all(&dir)?;
        }
    }
    Ok(())
}

/// usr/share/doc/<package>/: copyright, changelog.Debian.gz, THIRD-PARTY-NOTICES.gz.
fn write_docs(release: Release, root: &Path, notices: &Path) -> Result<()> {
    let doc = root.join("usr/share/doc").join(release.package());
    fs::create_dir_all(&doc)?;
    // The last commit's date: the same tree gives the same changelog and copyright.
    let sh = Shell::new()?;
    let _in_repo = sh.push_dir(util::root());
    let year = util::read(cmd!(sh, "git log -1 --format=%ad --date=format:%Y"))?;
    fs::write(
        doc.join("copyright"),
        copyright(release.major, year.trim())?,
    )?;
    let date = util::read(cmd!(sh, "git log -1 --format=%aD"))?;
    let changelog = format!(
        "omptarget-indirect ({VERSION}-1) unstable; urgency=medium\n\n  \
         * Release {VERSION} for LLVM {}.\n\n -- {}  {}\n",
        release.major,
        maintainer()?,
        date.trim()
    );
    gzip(&doc.join("changelog.Debian.gz"), changelog.as_bytes())?;
    gzip(&doc.join("THIRD-PARTY-NOTICES.gz"), &fs::read(notices)?)?;
    Ok(())
}

/// The maintainer field: DEBFULLNAME and DEBEMAIL, as Debian's tools read them, else
/// the author of the commit packaged.
fn maintainer() -> Result<String> {
    if let (Ok(name), Ok(email)) = (std::env::var("DEBFULLNAME"), std::env::var("DEBEMAIL")) {
        return Ok(format!("{name} <{email}>"));
    }
    let sh = Shell::new()?;
    let _in_repo = sh.push_dir(util::root());
    let format = "--format=%an <%ae>";
    Ok(util::read(cmd!(sh, "git log -1 {format}"))?
        .trim()
        .to_string())
}

/// The machine-readable copyright file: ours, LLVM's device runtime archive, and the
/// LLVM exception's text (from LICENSE).
fn copyright(major: u32, year: &str) -> Result<String> {
    let license = fs::read_to_string(util::root().join("LICENSE"))?;
    let exception = license
        .split("---- LLVM Exceptions to the Apache 2.0 License ----")
        .nth(1)
        .and_then(|rest| rest.split("=====").next())
        .context("LICENSE holds the LLVM exception")?;
    let exception: String = exception
        .trim()
        .lines()
        .map(|l| {
            if l.is_empty() {
                " .\n".to_string()
            } else {
                format!(" {l}\n")
            }
        })
        .collect();
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: omptarget-indirect-rs\n\
         Comment: The Rust crates linked into the binaries, with their licences, are listed\n \
         in THIRD-PARTY-NOTICES.gz beside this file.\n\n\
         Files: *\n\
         Copyright: {year} omptarget-indirect-rs developers\n\
         License: Apache-2.0 WITH LLVM-exception\n\n\
         Files: usr/lib/omptarget-indirect/llvm{major}/lib/omptarget-indirect/libomptarget.devicertl.a\n\
         Copyright: LLVM project contributors\n\
         License: Apache-2.0 WITH LLVM-exception\n\
         Comment: LLVM {major}'s own device runtime archive, with our device runtime added.\n\n\
         License: Apache-2.0 WITH LLVM-exception\n \
         On Debian systems the full text of the Apache License 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n \
         .\n \
         ---- LLVM Exceptions to the Apache 2.0 License ----\n \
         .\n{exception}"
    ))
}

/// usr/bin/omptarget-indirect-doctor-N -> the install's doctor.
fn link_doctor(release: Release, root: &Path) -> Result<()> {
    let doctor = release.prefix().join("bin").join(DOCTOR);
    ensure!(
        super::host_path(root, &doctor).is_file(),
        "the install has no {}",
        doctor.display()
    );
    let bin = root.join("usr/bin");
    fs::create_dir_all(&bin)?;
    let target = Path::new("..").join(doctor.strip_prefix("/usr")?);
    std::os::unix::fs::symlink(target, bin.join(release.doctor_on_path()))?;
    Ok(())
}

fn write_overrides(release: Release, root: &Path) -> Result<()> {
    let dir = root.join("usr/share/lintian/overrides");
    fs::create_dir_all(&dir)?;
    let package = release.package();
    let prefix = release.prefix();
    let folder = prefix.strip_prefix("/")?.display();
    let mut text = String::new();
    for (place, tags, hint, why) in OVERRIDES {
        text.push_str(&format!("# {why}\n"));
        for tag in *tags {
            text.push_str(&format!("{package}: {tag} {hint}[{folder}/{place}]\n"));
        }
    }
    fs::write(dir.join(&package), text)?;
    Ok(())
}

/// Strips the host binaries as Debian's dh_strip does (symbol tables too: the install
/// keeps them for its .debug files, which the package leaves out).
fn strip_host_binaries(root: &Path) -> Result<()> {
    let sh = Shell::new()?;
    for binary in util::paths_below(root, |_| false)?
        .into_iter()
        .filter(|p| is_host_binary(p))
    {
        let shared = binary.extension().is_some_and(|e| e == "so");
        let how: &[&str] = if shared {
            &["--strip-unneeded"]
        } else {
            &["--strip-all"]
        };
        cmd!(
            sh,
            "strip --remove-section=.comment --remove-section=.note {how...} {binary}"
        )
        .run()?;
    }
    Ok(())
}

/// Folders 0755, files 0644, or 0755 when executable (what dpkg-deb and lintian want
/// whatever the builder's umask).
fn normalise_permissions(root: &Path) -> Result<()> {
    for path in util::paths_below(root, |_| false)? {
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let executable = meta.is_dir() || meta.permissions().mode() & 0o111 != 0;
        let mode = if executable { 0o755 } else { 0o644 };
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// The LLVM packages a user's compile and run need: clang-N (the configs' compiler),
/// clang-tools-N (clang-offload-packager and clang-linker-wrapper, which every offload
/// compile runs) and libomp-N-dev (libomp and libomptarget).
pub fn llvm_dependencies(major: u32) -> [String; 3] {
    [
        format!("clang-{major}"),
        format!("clang-tools-{major}"),
        format!("libomp-{major}-dev"),
    ]
}

/// The Depends field: what dpkg-shlibdeps finds our host binaries link, and the LLVM
/// packages the configs use. Fails when glibc newer than [`NEWEST_GLIBC`] is needed.
fn depends(release: Release, root: &Path) -> Result<String> {
    let binaries: Vec<PathBuf> = util::paths_below(root, |_| false)?
        .into_iter()
        .filter(|p| is_host_binary(p))
        .collect();
    ensure!(!binaries.is_empty(), "no host binary in {}", root.display());
    // dpkg-shlibdeps reads debian/control from its working folder.
    let work = root.with_file_name("shlibdeps");
    fs::create_dir_all(work.join("debian"))?;
    fs::write(
        work.join("debian/control"),
        format!(
            "Source: omptarget-indirect\n\nPackage: {}\nArchitecture: amd64\n",
            release.package()
        ),
    )?;
    let sh = Shell::new()?;
    let _in_work = sh.push_dir(&work);
    let llvm_lib = format!("-l/usr/lib/llvm-{}/lib", release.major);
    let found = util::read(cmd!(
        sh,
        "dpkg-shlibdeps -O --ignore-missing-info {llvm_lib} {binaries...}"
    ))?;
    let shlibs = found
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .context("dpkg-shlibdeps printed no shlibs:Depends")?;
    let shlibs = without_architecture_restrictions(shlibs);
    check_glibc(&shlibs)?;
    Ok(format!(
        "{shlibs}, {}",
        llvm_dependencies(release.major).join(", ")
    ))
}

/// `shlibs` without the `[amd64 arm64]` restrictions symbols files put on some entries:
/// dpkg-gencontrol drops them for a binary package; dpkg-deb refuses them.
fn without_architecture_restrictions(shlibs: &str) -> String {
    shlibs
        .split(',')
        .map(|d| match d.find('[') {
            Some(at) => d[..at].trim(),
            None => d.trim(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An x86_64 executable or shared library (GPU code objects and archives are not).
fn is_host_binary(path: &Path) -> bool {
    use object::{Object, ObjectKind};
    let Ok(data) = fs::read(path) else {
        return false;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return false;
    };
    file.architecture() == object::Architecture::X86_64
        && matches!(file.kind(), ObjectKind::Executable | ObjectKind::Dynamic)
}

/// Fails when `shlibs` asks for a glibc newer than [`NEWEST_GLIBC`].
fn check_glibc(shlibs: &str) -> Result<()> {
    let Some(version) = shlibs
        .split(',')
        .map(str::trim)
        .find_map(|d| d.strip_prefix("libc6 (>= "))
        .and_then(|v| v.strip_suffix(')'))
    else {
        bail!("the binaries name no libc6 version: {shlibs}");
    };
    let mut parts = version
        .split(['.', '-', '~', '+'])
        .map(|p| p.parse::<u32>());
    let found = match (parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b))) => (a, b),
        _ => bail!("unreadable libc6 version `{version}`"),
    };
    ensure!(
        found <= NEWEST_GLIBC,
        "the binaries need glibc {version}, newer than {}.{} (Ubuntu 24.04's)",
        NEWEST_GLIBC.0,
        NEWEST_GLIBC.1
    );
    Ok(())
}

fn write_control(release: Release, root: &Path, depends: &str) -> Result<()> {
    let dir = root.join("DEBIAN");
    fs::create_dir_all(&dir)?;
    let size_kib = util::paths_below(root, |_| false)?
        .iter()
        .filter_map(|p| fs::symlink_metadata(p).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len().div_ceil(1024))
        .sum::<u64>();
    let major = release.major;
    let control = format!(
        "Package: {package}\n\
         Version: {VERSION}-1\n\
         Architecture: amd64\n\
         Maintainer: {maintainer}\n\
         Installed-Size: {size_kib}\n\
         Depends: {depends}\n\
         Suggests: lld-{major}\n\
         Section: devel\n\
         Priority: optional\n\
         Description: OpenMP declare target indirect for LLVM {major}'s offloading\n \
         Makes OpenMP 5.1 `declare target indirect` work with clang-{major}: a device\n \
         calls a function through a pointer holding the host function's address and\n \
         lands on the device version (also virtual calls on objects built on the\n \
         host). Holds a libomptarget plugin (host CPU, NVIDIA and AMD GPUs), a clang\n \
         plugin, the device runtime and config files for clang-{major}, and\n \
         {doctor}, which checks an installation.\n",
        package = release.package(),
        maintainer = maintainer()?,
        doctor = release.doctor_on_path(),
    );
    fs::write(dir.join("control"), control)?;
    Ok(())
}

fn write_md5sums(root: &Path) -> Result<()> {
    let sh = Shell::new()?;
    let _in_root = sh.push_dir(root);
    let files: Vec<String> = util::paths_below(root, |_| false)?
        .into_iter()
        .filter(|p| !p.starts_with(root.join("DEBIAN")))
        .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .collect();
    let sums = util::read(cmd!(sh, "md5sum {files...}"))?;
    fs::write(root.join("DEBIAN/md5sums"), sums)?;
    Ok(())
}

/// lintian with no error allowed; what it says otherwise is printed.
pub fn lintian(deb: &Path) -> Result<()> {
    util::ensure_debian_packages(&["lintian"])?;
    let sh = Shell::new()?;
    let output = cmd!(sh, "lintian --fail-on error --info {deb}")
        .ignore_status()
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    eprintln!("lintian {}:\n{text}", deb.display());
    ensure!(
        output.status.success(),
        "lintian found errors in {}:\n{text}{}",
        deb.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

fn gzip(to: &Path, data: &[u8]) -> Result<()> {
    let sh = Shell::new()?;
    let compressed = cmd!(sh, "gzip -9n").stdin(data).output()?;
    ensure!(compressed.status.success(), "gzip failed");
    fs::write(to, compressed.stdout)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_up_to_ubuntu_24_04_s_passes_and_newer_fails() {
        assert!(check_glibc("libc6 (>= 2.34), libgcc-s1 (>= 4.2)").is_ok());
        assert!(check_glibc("libgcc-s1 (>= 4.2), libc6 (>= 2.39)").is_ok());
        let err = check_glibc("libc6 (>= 2.41)").unwrap_err().to_string();
        assert!(err.contains("2.41"), "{err}");
        assert!(check_glibc("libgcc-s1 (>= 4.2)").is_err());
    }

    #[test]
    fn architecture_restrictions_are_dropped() {
        assert_eq!(
            without_architecture_restrictions(
                "libc6 (>= 2.34), libomp5-16 (>= 1:16.0.2-1~) [amd64 arm64], libllvm16"
            ),
            "libc6 (>= 2.34), libomp5-16 (>= 1:16.0.2-1~), libllvm16"
        );
    }

    #[test]
    fn the_copyright_file_carries_the_llvm_exception() {
        let text = copyright(17, "2026").unwrap();
        assert!(text.contains(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        ));
        assert!(text.contains("llvm17/lib/omptarget-indirect/libomptarget.devicertl.a"));
        assert!(text.contains(" As an exception, if, as a result of your compiling"));
        assert!(!text.lines().any(|l| l.trim().is_empty() && !l.is_empty()));
    }
}
