//! `omptarget-indirect-doctor`: checks an installed omptarget-indirect in one run and
//! says, one verdict per line (`ok`, `FAIL`, `warn`, `skip`), what works and how to
//! fix what does not: the install, the libomptarget programs load, which plugin file
//! libomptarget would load for each device kind, the clang config files, the GPUs,
//! and the self-test programs run on every device. Exit status 1 when anything FAILs.

mod configs;
mod cuda;
mod device_rtl;
mod dl;
mod elf_dynamic;
mod hip;
mod install;
mod ld_cache;
mod ld_search;
mod libomptarget;
mod plugin_search;
mod report;
mod run;
mod self_test;

use clap::Parser;
use report::Report;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "omptarget-indirect-doctor",
    about = "Check an omptarget-indirect install: libomptarget, which plugin loads, configs, GPUs, self-tests"
)]
struct Args {
    /// The install prefix (default: the folder above this executable's bin/).
    #[arg(long)]
    prefix: Option<PathBuf>,
    /// The LLVM major to check (default: the compiler plugin's, lib/libomptarget-indirect-clangN.so).
    #[arg(long)]
    llvm: Option<u32>,
    /// LLVM N's root (default: /usr/lib/llvm-N), where libomptarget and LLVM's plugins are.
    #[arg(long)]
    llvm_root: Option<PathBuf>,
    /// Seconds each self-test run may take.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Leave out the self-test runs.
    #[arg(long)]
    no_self_test: bool,
}

fn main() {
    let args = Args::parse();
    let mut report = Report::new(std::io::stdout().lock());
    check(&mut report, &args);
    report.summary();
    std::process::exit(report.exit_code());
}

fn check(report: &mut Report<impl std::io::Write>, args: &Args) {
    report.header("install");
    let overrides = install::Overrides {
        prefix: args.prefix.clone(),
        llvm: args.llvm,
        llvm_root: args.llvm_root.clone(),
    };
    let Some(install) = install::locate(report, &overrides) else {
        return;
    };
    report.header("libomptarget");
    let caller = libomptarget::check(report, &install);
    report.header("plugins");
    let choices = match &caller {
        Some(caller) => plugin_search::check(report, &install, caller),
        None => {
            report.skip("which plugins load: no libomptarget (above)", None);
            Vec::new()
        }
    };
    report.header("configs");
    configs::check(report, &install);
    report.header("devices");
    let cuda = cuda::check(report, &install);
    let hip = hip::check(report, &install);
    report.header("self-test");
    if args.no_self_test {
        report.skip("self-test runs (--no-self-test)", None);
        return;
    }
    let scratch = Scratch::new();
    let mut self_test = self_test::SelfTest::new(
        &install,
        scratch.0.clone(),
        Duration::from_secs(args.timeout),
    );
    let x86_64 = choices.iter().find(|c| c.kind == "x86_64");
    self_test.check(report, &cuda, &hip, x86_64);
}

/// A temporary folder for the runs' output, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("omptarget-indirect-doctor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
