//! The installed self-test programs (examples/standard_indirect.cpp built by clang-N
//! through our configs: `<prefix>/libexec/omptarget-indirect/self-test/
//! standard_indirect.<triple>[.<arch>]`), run on each device with
//! `OMP_TARGET_OFFLOAD=MANDATORY` and `LD_LIBRARY_PATH=<prefix>/lib:$LD_LIBRARY_PATH`,
//! and the plugin each run really loaded (`LD_DEBUG=files`).
//!
//! One more run of the x86_64 program in the environment exactly as it is says which
//! x86_64 plugin a program loads there: the ground truth for `[plugins]`' prediction.

use crate::cuda::CudaDevice;
use crate::device_rtl::nvptx_arch_for;
use crate::hip::HipDevice;
use crate::install::{Install, AMDGCN_TRIPLE, HOST_TRIPLE, NVPTX_TRIPLE};
use crate::plugin_search::{owner, Choice, Owner};
use crate::report::Report;
use crate::run::{self, last_lines, Outcome};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What a passing run prints: `standard example: N ok, 0 wrong`.
pub fn standard_result(stdout: &str) -> Option<(u32, u32)> {
    stdout.lines().rev().find_map(|line| {
        let rest = line.trim().strip_prefix("standard example: ")?;
        let (ok, rest) = rest.split_once(" ok, ")?;
        let wrong = rest.strip_suffix(" wrong")?;
        Some((ok.parse().ok()?, wrong.parse().ok()?))
    })
}

/// `CUDA_VISIBLE_DEVICES` / `HIP_VISIBLE_DEVICES` for the `ordinal`-th device this
/// process sees: the `ordinal`-th entry of the variable when it is set, else the
/// ordinal.
pub fn visible_device(inherited: Option<&str>, ordinal: usize) -> String {
    inherited
        .and_then(|list| list.split(',').map(str::trim).nth(ordinal))
        .map_or_else(|| ordinal.to_string(), str::to_owned)
}

/// One run of a self-test program.
struct Case<'a> {
    /// `host device`, `CUDA device 0 (sm_90)`.
    label: String,
    program: PathBuf,
    /// Set for the run, besides the offload policy and LD_LIBRARY_PATH.
    env: Vec<(&'a str, String)>,
    /// Unset for the run.
    unset: Vec<&'a str>,
    /// The plugin kind whose file the run must load: `x86_64`, `cuda`, `amdgpu`.
    kind: &'a str,
}

pub struct SelfTest<'a> {
    pub install: &'a Install,
    pub scratch: PathBuf,
    pub limit: Duration,
    runs: usize,
}

impl<'a> SelfTest<'a> {
    pub fn new(install: &'a Install, scratch: PathBuf, limit: Duration) -> Self {
        SelfTest {
            install,
            scratch,
            limit,
            runs: 0,
        }
    }

    /// `<prefix>/lib:$LD_LIBRARY_PATH`, as the runs get it.
    fn ld_library_path(&self) -> String {
        let lib = self.install.lib().display().to_string();
        match std::env::var("LD_LIBRARY_PATH") {
            Ok(v) if !v.is_empty() => format!("{lib}:{v}"),
            _ => lib,
        }
    }

    /// The `[self-test]` section.
    pub fn check(
        &mut self,
        report: &mut Report<impl Write>,
        cuda: &[CudaDevice],
        hip: &[HipDevice],
        predicted_x86_64: Option<&Choice>,
    ) {
        report.note(&format!(
            "each program runs with OMP_TARGET_OFFLOAD=MANDATORY LD_LIBRARY_PATH={}:$LD_LIBRARY_PATH (set by the doctor) and LD_DEBUG=files (which plugin it loads)",
            self.install.lib().display()
        ));
        self.host(report);
        for device in cuda {
            self.cuda(report, device);
        }
        for device in hip {
            self.hip(report, device);
        }
        if let Some(predicted) = predicted_x86_64 {
            self.as_environment_is(report, predicted);
        }
    }

    fn host(&mut self, report: &mut Report<impl Write>) {
        let program = self.install.self_test_program(HOST_TRIPLE, None);
        let host = |label: &str, isolated: bool| Case {
            label: label.into(),
            program: program.clone(),
            env: if isolated {
                vec![("OMPTARGET_RS_ISOLATED", "1".into())]
            } else {
                vec![]
            },
            unset: if isolated {
                vec![]
            } else {
                vec!["OMPTARGET_RS_ISOLATED"]
            },
            kind: "x86_64",
        };
        self.case(report, host("host device", false));
        self.case(report, host("isolated host device", true));
    }

    fn cuda(&mut self, report: &mut Report<impl Write>, device: &CudaDevice) {
        let label = format!("CUDA device {} ({})", device.ordinal, device.sm());
        let installed = self.install.self_test_arches(NVPTX_TRIPLE);
        let Some(arch) = nvptx_arch_for(&installed, device.cc.0, device.cc.1) else {
            self.missing(
                report,
                &label,
                &self
                    .install
                    .self_test_program(NVPTX_TRIPLE, Some(&device.sm())),
                &installed,
            );
            return;
        };
        let inherited = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        self.case(
            report,
            Case {
                label,
                program: self.install.self_test_program(NVPTX_TRIPLE, Some(&arch)),
                env: vec![(
                    "CUDA_VISIBLE_DEVICES",
                    visible_device(inherited.as_deref(), device.ordinal as usize),
                )],
                unset: vec![],
                kind: "cuda",
            },
        );
    }

    fn hip(&mut self, report: &mut Report<impl Write>, device: &HipDevice) {
        let label = format!("AMD GPU {}", device.ordinal);
        let Some(gfx) = &device.arch else {
            report.skip(format!("{label}: its architecture is unknown, so which self-test program runs on it is too"), None);
            return;
        };
        let program = self.install.self_test_program(AMDGCN_TRIPLE, Some(gfx));
        if !program.is_file() {
            self.missing(
                report,
                &format!("{label} ({gfx})"),
                &program,
                &self.install.self_test_arches(AMDGCN_TRIPLE),
            );
            return;
        }
        let inherited = std::env::var("HIP_VISIBLE_DEVICES").ok();
        self.case(
            report,
            Case {
                label: format!("{label} ({gfx})"),
                program,
                env: vec![(
                    "HIP_VISIBLE_DEVICES",
                    visible_device(inherited.as_deref(), device.ordinal as usize),
                )],
                unset: vec![],
                kind: "amdgpu",
            },
        );
    }

    fn missing(
        &self,
        report: &mut Report<impl Write>,
        label: &str,
        program: &Path,
        installed: &[String],
    ) {
        let installed = if installed.is_empty() {
            "none".into()
        } else {
            installed.join(", ")
        };
        report.skip(
            format!(
                "{label}: no self-test program {} (installed for: {installed})",
                program.display()
            ),
            Some("built by `cargo xtask install` (or the package)"),
        );
    }

    /// A folder of its own under the scratch folder for each run.
    fn run_dir(&mut self) -> PathBuf {
        self.runs += 1;
        self.scratch.join(format!("run-{}", self.runs))
    }

    fn case(&mut self, report: &mut Report<impl Write>, case: Case) {
        if !case.program.is_file() {
            self.missing(report, &case.label, &case.program, &[]);
            return;
        }
        let mut cmd = Command::new(&case.program);
        cmd.env("OMP_TARGET_OFFLOAD", "MANDATORY")
            .env("LD_LIBRARY_PATH", self.ld_library_path());
        for (k, v) in &case.env {
            cmd.env(k, v);
        }
        for k in &case.unset {
            cmd.env_remove(k);
        }
        let dir = self.run_dir();
        let rerun = self.rerun_line(&case);
        match run::run(cmd, &dir, self.limit) {
            Ok(outcome) => self.judge(report, &case, &outcome, &rerun),
            Err(e) => report.fail(
                format!(
                    "{}: {} did not start: {e}",
                    case.label,
                    case.program.display()
                ),
                rerun,
            ),
        }
    }

    /// How to repeat a run by hand, with our plugin's log.
    fn rerun_line(&self, case: &Case) -> String {
        let env: Vec<String> = case.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "rerun it with our plugin's log: OMP_TARGET_OFFLOAD=MANDATORY LD_LIBRARY_PATH={} {}OMPTARGET_RS_DEBUG=1 {}",
            self.ld_library_path(),
            env.iter().map(|e| format!("{e} ")).collect::<String>(),
            case.program.display()
        )
    }

    fn judge(&self, report: &mut Report<impl Write>, case: &Case, outcome: &Outcome, rerun: &str) {
        let plugin = loaded_plugin(outcome, case.kind);
        let plugin_text = plugin
            .as_ref()
            .map_or(format!("no {} plugin loaded", case.kind), |p| {
                format!("plugin {}", p.display())
            });
        let ours = plugin
            .as_deref()
            .is_some_and(|p| owner(p, self.install) == Owner::Ours);
        let result = standard_result(&outcome.stdout);
        let exited_0 = outcome.status.is_some_and(|s| s.success());
        match result {
            Some((n, 0)) if n > 0 && exited_0 && ours => {
                report.ok(format!(
                    "{}: standard example: {n} ok, 0 wrong ({plugin_text})",
                    case.label
                ));
                return;
            }
            _ => {}
        }
        let why = match (outcome.status, result) {
            (None, _) => format!("killed after {} s", self.limit.as_secs()),
            (Some(s), _) if !s.success() => format!("exited with {s}"),
            (_, None) => "printed no `standard example:` line".into(),
            (_, Some((n, w))) if w > 0 || n == 0 => format!("standard example: {n} ok, {w} wrong"),
            _ => format!("passed, but through {plugin_text}, not ours"),
        };
        report.fail(
            format!(
                "{}: {} {why} ({plugin_text})",
                case.label,
                case.program.display()
            ),
            rerun,
        );
        report.detail(last_lines(&outcome.stdout, 6));
        report.detail(last_lines(&outcome.stderr, 6));
    }

    /// The x86_64 program in the environment as it is (only LD_DEBUG added): which
    /// x86_64 plugin did it load, and did `[plugins]` predict that one?
    fn as_environment_is(&mut self, report: &mut Report<impl Write>, predicted: &Choice) {
        let program = self.install.self_test_program(HOST_TRIPLE, None);
        if !program.is_file() {
            return;
        }
        let dir = self.run_dir();
        let outcome = match run::run(Command::new(&program), &dir, self.limit) {
            Ok(o) => o,
            Err(e) => {
                report.warn(
                    format!(
                        "{} did not start in this environment: {e}",
                        program.display()
                    ),
                    None,
                );
                return;
            }
        };
        let loaded = loaded_plugin(&outcome, "x86_64");
        let predicted_path = predicted.found.as_ref().map(|(f, _)| f.path.as_path());
        let agree = match (&loaded, predicted_path) {
            (Some(a), Some(b)) => same_file(a, b),
            (None, None) => true,
            _ => false,
        };
        let whose = |p: &Path| match owner(p, self.install) {
            Owner::Ours => "ours",
            Owner::Llvm => "LLVM's",
            Owner::Other => "not this install's",
        };
        let loaded_text = loaded.as_deref().map_or("no x86_64 plugin".into(), |p| {
            format!("{} ({})", p.display(), whose(p))
        });
        if agree {
            report.ok(format!("in this environment as it is, a program loads {loaded_text}: what [plugins] predicted"));
        } else {
            let predicted_text = predicted_path.map_or("none".into(), |p| p.display().to_string());
            report.warn(
                format!("in this environment as it is, a program loads {loaded_text}, but [plugins] predicted {predicted_text}: this line is what the loader did"),
                Some("please report it: the doctor's loader search missed something"),
            );
        }
    }
}

/// The plugin file of `kind` the run opened.
fn loaded_plugin(outcome: &Outcome, kind: &str) -> Option<PathBuf> {
    let start = format!("libomptarget.rtl.{kind}.");
    outcome
        .opened
        .iter()
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&start))
        })
        .cloned()
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    id(a).is_some() && id(a) == id(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_examples_result_line() {
        let out = "add_one(20) through a pointer       1021 (want  1021): ok\nstandard example: 4 ok, 0 wrong\n";
        assert_eq!(standard_result(out), Some((4, 0)));
        assert_eq!(
            standard_result("standard example: 3 ok, 1 wrong"),
            Some((3, 1))
        );
        assert_eq!(standard_result("nothing"), None);
    }

    #[test]
    fn visible_devices_follow_an_inherited_list() {
        assert_eq!(visible_device(None, 1), "1");
        assert_eq!(visible_device(Some("2,3"), 1), "3");
        assert_eq!(visible_device(Some("GPU-abc, GPU-def"), 1), "GPU-def");
        assert_eq!(visible_device(Some("2"), 1), "1");
    }
}
