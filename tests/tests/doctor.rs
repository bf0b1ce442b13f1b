//! The installed doctor (`target/install/bin/omptarget-indirect-doctor`, built and
//! installed by `cargo xtask install --prefix target/install`, whose self-test programs
//! it runs) as a user runs it: its verdicts on which x86_64 plugin loads with and
//! without `LD_LIBRARY_PATH=<prefix>/lib`, its host self-tests, its exit status, and
//! the devices it reports through the CUDA driver stand-in.

use e2e_tests::cuda_standin::{self, Log};
use e2e_tests::paths::{require_file, scratch, target_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

const HOW: &str = "`cargo xtask install --prefix target/install`";

fn prefix() -> PathBuf {
    target_dir().join("install")
}

fn doctor() -> PathBuf {
    let layout = install_layout::Prefix::new(prefix());
    require_file(layout.bin(install_layout::DOCTOR), HOW)
}

/// One run: its exit status, its output, and the pid it ran as.
struct Run {
    code: i32,
    out: String,
    pid: u32,
}

impl Run {
    /// (verdict, text) of every verdict line.
    fn verdicts(&self) -> Vec<(&str, &str)> {
        self.out
            .lines()
            .filter_map(|l| {
                let (verdict, text) = l.split_once(": ")?;
                ["ok", "FAIL", "warn", "skip"]
                    .contains(&verdict)
                    .then_some((verdict, text))
            })
            .collect()
    }

    /// The verdict line whose text starts with `start` (the test fails without one).
    fn line(&self, start: &str) -> (&str, &str) {
        self.verdicts()
            .into_iter()
            .find(|(_, text)| text.starts_with(start))
            .unwrap_or_else(|| panic!("no `{start}` line:\n{}", self.out))
    }

    /// The line after the verdict line whose text starts with `start`.
    fn fix_of(&self, start: &str) -> &str {
        let lines: Vec<&str> = self.out.lines().collect();
        let at = lines
            .iter()
            .position(|l| {
                l.split_once(": ")
                    .is_some_and(|(_, t)| t.starts_with(start))
            })
            .unwrap_or_else(|| panic!("no `{start}` line:\n{}", self.out));
        lines.get(at + 1).copied().unwrap_or_default()
    }

    /// The lines of `[section]`.
    fn section(&self, name: &str) -> Vec<&str> {
        let header = format!("[{name}]");
        self.out
            .lines()
            .skip_while(|l| *l != header)
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .collect()
    }
}

/// The doctor with the environment of a user's shell that sets none of what it
/// checks (cargo's test LD_LIBRARY_PATH and the suite's switches taken out), plus `env`.
fn run(env: &[(&str, String)], args: &[&str]) -> Run {
    let mut cmd = Command::new(doctor());
    for name in [
        "LD_LIBRARY_PATH",
        "OMP_TARGET_OFFLOAD",
        "OMPTARGET_RS_ISOLATED",
        "LIBOMPTARGET_NEXTGEN_PLUGINS",
        "CUDA_VISIBLE_DEVICES",
        "LD_DEBUG",
    ] {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)))
        .args(args)
        .stdout(std::process::Stdio::piped());
    let child = cmd.spawn().expect("start the doctor");
    let pid = child.id();
    let output = child.wait_with_output().expect("the doctor's output");
    let run = Run {
        code: output.status.code().expect("the doctor exits"),
        out: String::from_utf8_lossy(&output.stdout).into_owned(),
        pid,
    };
    println!("{}", run.out);
    // The exit status contract: 1 exactly when a line FAILs.
    let fails = run.verdicts().iter().filter(|(v, _)| *v == "FAIL").count();
    assert_eq!(run.code, i32::from(fails > 0), "{}", run.out);
    run
}

fn lib() -> String {
    prefix().join("lib").display().to_string()
}

/// The host self-tests passed through our x86_64 plugin, on both host devices.
fn assert_host_self_tests_pass(run: &Run) {
    for device in ["host device", "isolated host device"] {
        let (verdict, text) = run.line(&format!("{device}:"));
        assert_eq!(verdict, "ok", "{text}");
        assert!(text.contains(", 0 wrong"), "{text}");
        assert!(
            text.contains(&format!("(plugin {}/libomptarget.rtl.x86_64.", lib())),
            "{text}"
        );
    }
}

#[test]
fn with_the_prefix_on_ld_library_path_ours_loads_and_the_host_self_tests_pass() {
    let run = run(&[("LD_LIBRARY_PATH", lib())], &[]);
    let (verdict, text) = run.line("x86_64:");
    assert_eq!(verdict, "ok", "{text}");
    assert!(
        text.starts_with(&format!("x86_64: ours, {}/", lib())),
        "{text}"
    );
    assert!(text.contains("LD_LIBRARY_PATH entry"), "{text}");
    assert_host_self_tests_pass(&run);
    // The run in the environment as it is agrees with the prediction.
    let (verdict, text) = run.line("in this environment as it is");
    assert_eq!((verdict, text.contains("(ours)")), ("ok", true), "{text}");
    for section in ["install", "libomptarget", "plugins", "configs"] {
        let lines = run.section(section);
        assert!(
            !lines.iter().any(|l| l.starts_with("FAIL")),
            "[{section}] fails:\n{}",
            run.out
        );
    }
}

#[test]
fn without_ld_library_path_llvms_x86_64_plugin_fails_with_the_fix() {
    let llvm = Path::new("/usr/lib/llvm-16/lib");
    let llvms_plugin = [
        "libomptarget.rtl.x86_64.nextgen.so",
        "libomptarget.rtl.x86_64.so",
    ]
    .iter()
    .any(|name| llvm.join(name).is_file());
    let run = run(&[], &[]);
    if !llvms_plugin {
        println!(
            "SKIPPED: LLVM 16 has no x86_64 plugin in {}",
            llvm.display()
        );
        return;
    }
    let (verdict, text) = run.line("x86_64:");
    assert_eq!(verdict, "FAIL", "{text}");
    assert!(
        text.starts_with("x86_64: LLVM's /usr/lib/llvm-16/lib/"),
        "{text}"
    );
    assert!(text.contains("RUNPATH entry $ORIGIN/../lib of"), "{text}");
    assert_eq!(
        run.fix_of("x86_64:"),
        format!("  fix: export LD_LIBRARY_PATH={}", lib())
    );
    assert_eq!(run.code, 1);
    // The doctor's own runs set LD_LIBRARY_PATH, and pass; the one in the environment
    // as it is loaded LLVM's plugin, as predicted.
    assert_host_self_tests_pass(&run);
    let (verdict, text) = run.line("in this environment as it is");
    assert_eq!((verdict, text.contains("(LLVM's)")), ("ok", true), "{text}");
}

#[test]
fn the_cuda_driver_stand_in_shows_its_devices() {
    let dir = scratch("doctor", "standin");
    let log = dir.join("standin.log");
    let standin = cuda_standin::dir();
    let run = run(
        &[
            (
                "LD_LIBRARY_PATH",
                format!("{}:{}", standin.display(), lib()),
            ),
            ("OMPTARGET_RS_CUDA_STANDIN_DEVICES", "2".into()),
            ("OMPTARGET_RS_CUDA_STANDIN_SM", "80".into()),
            (cuda_standin::LOG_ENV, log.display().to_string()),
        ],
        &[],
    );
    let (verdict, text) = run.line("CUDA driver ");
    assert_eq!(verdict, "ok", "{text}");
    assert!(
        text.starts_with(&format!(
            "CUDA driver {}/libcuda.so.1 (CUDA 13.0): 2 device(s)",
            standin.display()
        )),
        "{text}"
    );
    for device in [0, 1] {
        let (verdict, text) = run.line(&format!("CUDA device {device}: "));
        assert_eq!(verdict, "ok", "{text}");
        assert_eq!(
            text,
            format!("CUDA device {device}: CUDA driver stand-in (sm_80), sm_80; our device RTL is installed for sm_80")
        );
        // The self-test of that device ran the sm_80 program through our cuda plugin
        // to the stand-in, which runs no kernel; without ptxas at install time there is
        // no program to run.
        let (verdict, text) = run.line(&format!("CUDA device {device} (sm_80):"));
        match verdict {
            "FAIL" => {
                assert!(
                    text.contains(&format!("(plugin {}/libomptarget.rtl.cuda.", lib())),
                    "{text}"
                );
                assert!(run.out.contains(cuda_standin::CANNOT_RUN), "{}", run.out);
            }
            verdict => assert_eq!(verdict, "skip", "{text}"),
        }
    }
    // The doctor's own driver calls (cuInit, the device queries) were all valid.
    let doctors = Log::read(&log, Some(run.pid));
    assert!(doctors.init().is_some(), "the doctor never called cuInit");
    assert_eq!(doctors.errors(), [] as [(&str, &str, &str); 0]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_folder_that_is_no_install_fails_and_stops() {
    let dir = scratch("doctor", "not-an-install");
    let run = run(&[], &["--prefix", dir.to_str().unwrap()]);
    let (verdict, text) = run.line(&dir.display().to_string());
    assert_eq!(verdict, "FAIL", "{text}");
    assert!(
        text.ends_with("has no lib/ folder: not an install prefix"),
        "{text}"
    );
    assert!(!run.out.contains("[plugins]"), "{}", run.out);
    std::fs::remove_dir_all(dir).unwrap();
}
