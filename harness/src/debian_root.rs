//! Cached `debootstrap --variant=minbase` Debian roots under target/, and the mounts a
//! chrooted run needs. Used by the GPU kit's bare-root proof (this machine's own
//! release) and by `cargo xtask lit --llvm 17` (Debian 13, trixie).
//!
//! The archive is never named here: it is the one this machine's apt takes its own
//! release's `main` from (read from `apt-cache policy`), which also serves the other
//! releases of the same distribution.
//!
//! A root is complete once its stamp file exists (written after debootstrap and the
//! caller's setup, such as `apt-get install`, succeeded); a root without it is an
//! interrupted one and is made anew.

use crate::{cache_lock, root_cargo, util};
use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;
use xshell::{cmd, Shell};

/// Written into a root once it is complete (the name the bare root has always used, so
/// roots made before this module existed stay valid).
const STAMP: &str = ".omptarget-rs-bare-root-complete";

/// What a root is made of.
pub struct RootSpec<'a> {
    /// Its folder below target/ (e.g. `bare-root/bookworm-minbase-python3`).
    pub dir: &'a str,
    /// The release to bootstrap.
    pub codename: &'a str,
    /// Packages debootstrap includes (`--include`), besides minbase.
    pub include: &'a [&'a str],
    /// What the set-up makes, written into the stamp: a cached root whose stamp does
    /// not end with it (a different package list) is made anew. Empty: any complete
    /// root will do.
    pub describe: &'a str,
    /// Set-up inside the new root before it counts as complete (e.g. `apt-get install`).
    pub setup: &'a dyn Fn(&Path) -> Result<()>,
}

/// The cached root of `spec`, made now when missing or incomplete: (its folder, seconds
/// spent making it now).
pub fn cached(spec: &RootSpec) -> Result<(PathBuf, Option<f64>)> {
    util::ensure_debian_packages(&["debootstrap"])?;
    let root = util::target_dir().join(spec.dir);
    let _lock = cache_lock::lock(&root)?;
    let stamp = root.join(STAMP);
    if let Ok(text) = fs::read_to_string(&stamp) {
        if text.trim_end().ends_with(spec.describe) {
            eprintln!("debian root: using {}", root.display());
            return Ok((root, None));
        }
        eprintln!(
            "debian root: {} was made for `{}`, not `{}`: making it anew",
            root.display(),
            text.trim_end(),
            spec.describe
        );
    }
    if root.exists() {
        // Interrupted: nothing may be mounted in it before it goes.
        unmount_below(&root)?;
        fs::remove_dir_all(&root)?;
    }
    fs::create_dir_all(root.parent().unwrap())?;
    let mirror = archive()?;
    let start = Instant::now();
    let sh = Shell::new()?;
    let codename = spec.codename;
    let include: Vec<String> = if spec.include.is_empty() {
        Vec::new()
    } else {
        vec![format!("--include={}", spec.include.join(","))]
    };
    cmd!(
        sh,
        "debootstrap --variant=minbase {include...} {codename} {root} {mirror}"
    )
    .run()
    .context("debootstrap failed")?;
    (spec.setup)(&root).with_context(|| format!("setting up {}", root.display()))?;
    fs::write(
        &stamp,
        format!("{codename} from {mirror}; {}\n", spec.describe),
    )?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!("debian root: {} made in {secs:.0} s", root.display());
    Ok((root, Some(secs)))
}

/// This machine's release (`VERSION_CODENAME` of /etc/os-release).
/// The cached bare root of `codename` (debootstrapped now when missing): the base
/// system and python3, nothing else, as a GPU node or a user's fresh machine has it:
/// (its folder, seconds spent making it now). A run that installs into it works on a
/// [`fresh_copy`].
pub fn bare(codename: &str) -> Result<(PathBuf, Option<f64>)> {
    let dir = format!("bare-root/{codename}-minbase-python3");
    cached(&RootSpec {
        dir: &dir,
        codename,
        include: &["python3"],
        describe: "",
        setup: &|_| Ok(()),
    })
}

/// `root` (a copy made by [`fresh_copy`]) removed, what is still mounted in it
/// unmounted first.
pub fn remove_root(root: &Path) -> Result<()> {
    unmount_below(root)?;
    fs::remove_dir_all(root).with_context(|| format!("removing {}", root.display()))
}

/// A copy of the root `base` at target/`dir`, made anew (what an earlier run left
/// mounted in it unmounted first).
pub fn fresh_copy(base: &Path, dir: &str) -> Result<PathBuf> {
    let copy = util::target_dir().join(dir);
    if copy.exists() {
        unmount_below(&copy)?;
        fs::remove_dir_all(&copy).with_context(|| format!("removing {}", copy.display()))?;
    }
    fs::create_dir_all(copy.parent().unwrap())?;
    let sh = Shell::new()?;
    cmd!(sh, "cp -a {base} {copy}").run()?;
    Ok(copy)
}

/// The archive this machine's apt takes its own release's `main` from.
fn archive() -> Result<String> {
    let codename = release::llvm_release::os_release_codename()?;
    let sh = Shell::new()?;
    let policy = util::read(cmd!(sh, "apt-cache policy"))?;
    archive_in_policy(&policy, &codename).with_context(|| {
        format!("apt's configuration has no archive for {codename}/main (apt-cache policy)")
    })
}

/// From `apt-cache policy`'s package files, `<priority> <uri> <suite>/<component> <arch>
/// Packages`: the URI of the first one for `<codename>/main`.
fn archive_in_policy(policy: &str, codename: &str) -> Option<String> {
    let wanted = format!("{codename}/main");
    policy.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let is_archive = f.len() == 5 && f[4] == "Packages" && f[0].parse::<i64>().is_ok();
        (is_archive && f[2] == wanted && f[1].contains("://"))
            .then(|| f[1].trim_end_matches('/').to_owned())
    })
}

/// `chroot <root> /usr/bin/env -i PATH=... HOME=/root LANG=C.UTF-8 <args...>`: a clean
/// environment, so nothing of this machine's (LD_LIBRARY_PATH, PATH to toolchains)
/// reaches the root. Cargo runs only offline there ([`root_cargo`]).
pub fn chroot_cmd<'a>(sh: &'a Shell, root: &Path, args: &[&str]) -> xshell::Cmd<'a> {
    root_cargo::assert_offline(args);
    let clean = CLEAN_ENV;
    cmd!(sh, "chroot {root} {clean...} {args...}")
}

/// A Debian root as the place an older LLVM's tools run for the device build (its binds
/// must show the device build's files at their own paths).
pub struct InRoot<'a>(pub &'a Path);

impl device_build::ToolPlace for InRoot<'_> {
    fn cmd<'s>(&self, sh: &'s Shell, args: &[&str]) -> xshell::Cmd<'s> {
        chroot_cmd(sh, self.0, args)
    }
}

/// `args` (a program and its arguments) on this machine, or inside `root` as
/// [`chroot_cmd`] runs them: for steps that run the same way for a version this machine
/// has and for one a Debian root has.
pub fn cmd_in<'a>(sh: &'a Shell, root: Option<&Path>, args: &[&str]) -> xshell::Cmd<'a> {
    match root {
        Some(root) => chroot_cmd(sh, root, args),
        None => {
            let (program, rest) = args.split_first().expect("a command");
            cmd!(sh, "{program} {rest...}")
        }
    }
}

/// `path` (absolute, as a program inside `root` sees it) as this machine sees it; itself
/// when there is no root.
pub fn host_path(root: Option<&Path>, path: &Path) -> PathBuf {
    match root {
        Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_path_buf(),
    }
}

/// What [`chroot_cmd`] runs inside the root before the command: a clean environment.
pub const CLEAN_ENV: [&str; 6] = [
    "/usr/bin/env",
    "-i",
    "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/root",
    "LANG=C.UTF-8",
    "DEBIAN_FRONTEND=noninteractive",
];

/// Writes `script`, an executable that runs `command` (with its arguments) inside `root`
/// as [`chroot_cmd`] does, for a program run on this machine that expects a tool on its
/// own path (the root's mounts must be up while it runs).
pub fn write_chroot_script(script: &Path, root: &Path, command: &str) -> Result<()> {
    root_cargo::assert_offline(&[command]);
    use std::os::unix::fs::PermissionsExt;
    let quoted = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let root = root.display().to_string();
    let line: Vec<String> = ["chroot", &root]
        .into_iter()
        .chain(CLEAN_ENV)
        .chain([command])
        .map(quoted)
        .collect();
    if let Some(dir) = script.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(
        script,
        format!(
            "#!/bin/sh\n# {command} of the root {root} (written by cargo xtask)\nexec {} \"$@\"\n",
            line.join(" ")
        ),
    )
    .with_context(|| format!("writing {}", script.display()))?;
    fs::set_permissions(script, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// What is mounted inside the root for one run; unmounted when dropped, in reverse.
/// One run at a time per root: a second `cargo xtask` using the same root waits for the
/// first (its set-up unmounts what an interrupted run left, which would pull the mounts
/// from under a live one).
pub struct Mounts {
    points: Vec<PathBuf>,
    /// Held (an exclusive lock on `<root>.lock`) until the mounts are gone.
    _lock: fs::File,
}

impl Mounts {
    /// /proc and a tmpfs on /dev/shm (lit's worker pool needs it), and each of `binds`
    /// (host folders) bind-mounted at the same path inside the root, so that paths
    /// read the same inside and out.
    pub fn new(root: &Path, binds: &[&Path]) -> Result<Self> {
        let lock_path = root.with_extension("lock");
        let lock = fs::File::create(&lock_path)
            .with_context(|| format!("creating {}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            eprintln!(
                "debian root: {} is in use by another run: waiting for it",
                root.display()
            );
            lock.lock()
                .with_context(|| format!("locking {}", lock_path.display()))?;
        }
        unmount_below(root)?;
        let mut mounts = Mounts {
            points: Vec::new(),
            _lock: lock,
        };
        let sh = Shell::new()?;
        let proc_dir = root.join("proc");
        let shm = root.join("dev/shm");
        fs::create_dir_all(&proc_dir)?;
        fs::create_dir_all(&shm)?;
        cmd!(sh, "mount -t proc proc {proc_dir}").run()?;
        mounts.private(&sh, proc_dir)?;
        cmd!(sh, "mount -t tmpfs -o size=512m tmpfs {shm}").run()?;
        mounts.private(&sh, shm)?;
        for host in binds {
            let host = fs::canonicalize(host)
                .with_context(|| format!("{} does not exist", host.display()))?;
            let inside = root.join(host.strip_prefix("/").unwrap_or(&host));
            fs::create_dir_all(&inside)?;
            cmd!(sh, "mount --bind {host} {inside}").run()?;
            mounts.private(&sh, inside)?;
        }
        Ok(mounts)
    }

    /// Keep the mount at `point` (to be unmounted on drop) and make it private: where `/`
    /// is a shared mount, a mount made below it joins its peer group, and then a bind of
    /// a folder that holds another root (a run binding the workspace) receives, and on
    /// unmounting removes, that root's mounts too.
    fn private(&mut self, sh: &Shell, point: PathBuf) -> Result<()> {
        self.points.push(point.clone());
        cmd!(sh, "mount --make-private {point}").run()?;
        Ok(())
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for point in self.points.iter().rev() {
            if let Err(e) = unmount(point) {
                eprintln!("debian root: {e:#}");
            }
        }
    }
}

fn unmount(point: &Path) -> Result<()> {
    let sh = Shell::new()?;
    if cmd!(sh, "umount {point}").run().is_err() {
        // Busy (a process left behind): detach it now, it goes when released.
        cmd!(sh, "umount --lazy {point}")
            .run()
            .with_context(|| format!("could not unmount {}", point.display()))?;
    }
    Ok(())
}

/// Unmounts whatever an earlier, interrupted run left mounted below `root`.
pub fn unmount_below(root: &Path) -> Result<()> {
    let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    let mut points: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(&root) && *p != root)
        .collect();
    // Deepest first.
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for point in points {
        unmount(&point)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_is_the_one_serving_the_release_main_component() {
        let policy = "Package files:\n 100 /var/lib/dpkg/status\n     release a=now\n \
            500 http://security.example/debian-security bookworm-security/main amd64 Packages\n \
            500 http://archive.example/debian bookworm-updates/main amd64 Packages\n \
            500 http://archive.example/debian/ bookworm/main amd64 Packages\n     \
            release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=main,b=amd64\n";
        assert_eq!(
            archive_in_policy(policy, "bookworm").as_deref(),
            Some("http://archive.example/debian")
        );
        assert_eq!(archive_in_policy(policy, "trixie"), None);
    }
}
