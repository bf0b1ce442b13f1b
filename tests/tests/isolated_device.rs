//! The isolated host device (`OMPTARGET_RS_ISOLATED=1`) under the real libomptarget 16:
//! device code that uses a host address faults there with a report naming the address,
//! what it is in the host and the kind of access, where the in-process host device runs
//! the same program silently; the device process ends with the program, however it
//! ends; what a discrete GPU lacks (unified shared memory) is refused with the reason.

mod plugin_support;

use e2e_tests::paths::fixture;
use plugin_support::{compile_offload_sources, plugin_dir, scratch};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// How a program runs: on the in-process host device or the isolated one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    InProcess,
    Isolated,
}

fn command(exe: &Path, mode: Mode, args: &[&str]) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", plugin_dir())
        .env_remove("OMPTARGET_RS_ISOLATED")
        .env_remove("OMPTARGET_RS_DEBUG");
    if mode == Mode::Isolated {
        cmd.env("OMPTARGET_RS_ISOLATED", "1");
    }
    cmd
}

fn run(exe: &Path, mode: Mode, args: &[&str]) -> (Output, String, String) {
    let out = command(exe, mode, args)
        .stdin(Stdio::null())
        .output()
        .expect("start the program");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// tests/fixtures/isolated/host_addresses.cpp built at `opt` (no compiler plugin, no
/// device RTL: nothing translates a host address).
fn host_addresses_program(opt: &str) -> PathBuf {
    let dir = scratch(&format!("isolated-host-addresses{opt}"));
    let exe = dir.join("host_addresses");
    compile_offload_sources(
        &[&fixture("isolated/host_addresses.cpp")],
        &exe,
        false,
        &[opt, "-Wno-openmp-mapping"],
    );
    exe
}

/// Each case: what it prints on the in-process device, the access and the host symbol
/// the isolated device's report names.
const CASES: &[(&str, &str, &str, &str)] = &[
    ("call", "result 1001", "call to address", "_Z9host_onlyi"),
    ("global", "result 7", "read of address", "host_global"),
    ("vtable", "result 4", "read of address", "_ZTV6Square+16"),
];

#[test]
fn a_host_address_faults_on_the_isolated_device_and_runs_silently_in_process() {
    for opt in ["-O0", "-O2"] {
        let exe = host_addresses_program(opt);
        for &(case, silent, access, symbol) in CASES {
            let (out, stdout, stderr) = run(&exe, Mode::InProcess, &[case]);
            assert!(
                out.status.success() && stdout.contains(silent),
                "{opt} {case} in-process: the host device shares the host's address space \
                 and should have run it: {}\n{stdout}\n{stderr}",
                out.status
            );

            let (out, stdout, stderr) = run(&exe, Mode::Isolated, &[case]);
            let context = format!("{opt} {case} isolated: {}\n{stdout}\n{stderr}", out.status);
            assert!(!out.status.success(), "{context}");
            assert!(!stdout.contains("result"), "it must not go on: {context}");
            for expected in [
                "faulted on the device",
                access,
                "a host address",
                symbol,
                &*exe.to_string_lossy(),
                "in the device image",
            ] {
                assert!(stderr.contains(expected), "no `{expected}`: {context}");
            }
            // libomptarget ends the program as it does after a GPU's failed launch.
            assert!(
                stderr.contains("Libomptarget fatal error"),
                "libomptarget did not fail the program: {context}"
            );
        }
    }
}

#[test]
fn device_output_keeps_its_place_among_the_programs_own() {
    let exe = host_addresses_program("-O1");
    for mode in [Mode::InProcess, Mode::Isolated] {
        let (out, stdout, stderr) = run(&exe, mode, &["order"]);
        assert!(out.status.success(), "{mode:?}: {}\n{stderr}", out.status);
        assert_eq!(
            stdout, "host 1\ndevice 2\nhost 3\nresult 3\n",
            "{mode:?}: {stderr}"
        );
    }
}

#[test]
fn the_start_leaves_no_host_range_reachable_from_the_device() {
    let exe = host_addresses_program("-O1");
    let out = command(&exe, Mode::Isolated, &["order"])
        .env("OMPTARGET_RS_DEBUG", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let start = stderr
        .lines()
        .find(|l| l.contains("isolated device: process") && l.contains("could not be"))
        .unwrap_or_else(|| panic!("no start report:\n{stderr}"));
    assert!(
        start.contains("; 0 of the host's") && start.contains("(0 could not be)"),
        "{start}"
    );
    let before_launch: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("before the launch"))
        .collect();
    assert!(!before_launch.is_empty(), "{stderr}");
    for line in before_launch {
        assert!(
            line.contains("before the launch, 0 of the host's"),
            "{line}"
        );
    }
}

/// The pid of the device process, from the debug log.
fn device_pid(log: &str) -> Option<i32> {
    let line = log
        .lines()
        .find(|l| l.contains("isolated device: process") && l.contains("could not be"))?;
    let rest = line.split("isolated device: process ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn the_device_process_ends_with_a_killed_program_and_leaves_nothing() {
    let exe = host_addresses_program("-O1");
    // Orphans of this test's children become this test's children, so the device
    // process's end can be waited for (and it is reaped: no zombie).
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) only changes who adopts our orphans.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) }, 0);
    let mut program = command(&exe, Mode::Isolated, &["wait"])
        .env("OMPTARGET_RS_DEBUG", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(program.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // The program is blocked on its stdin, its device process started and idle.
    // SAFETY: kill of our own child.
    assert_eq!(unsafe { libc::kill(program.id() as i32, libc::SIGKILL) }, 0);
    let status = program.wait().unwrap();
    assert!(!status.success());
    let mut log = String::new();
    std::io::Read::read_to_string(&mut program.stderr.take().unwrap(), &mut log).unwrap();
    let device = device_pid(&log).unwrap_or_else(|| panic!("no device pid in:\n{log}"));
    let mut wait_status = 0;
    // SAFETY: waitpid on a process this test adopted (subreaper); blocks until it ends.
    let reaped = unsafe { libc::waitpid(device, &mut wait_status, 0) };
    assert_eq!(
        reaped, device,
        "the device process {device} was not ours to reap"
    );
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with(&format!("omptarget-rs-image-{device}-"))
                || n.starts_with(&format!("omptarget-rs-image-{}-", program.id()))
        })
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

/// A device address handed to the plugin as a host buffer: in-process the two are one
/// memory; isolated, the plugin refuses the copy with the reason instead of reading it.
#[test]
fn a_device_pointer_used_as_host_memory_is_refused_with_the_reason() {
    let exe = host_addresses_program("-O1");
    let (out, stdout, stderr) = run(&exe, Mode::InProcess, &["devptr"]);
    assert!(
        out.status.success() && stdout.contains("result 0"),
        "{stdout}\n{stderr}"
    );
    let (out, stdout, stderr) = run(&exe, Mode::Isolated, &["devptr"]);
    assert!(
        out.status.success(),
        "the program goes on: {stdout}\n{stderr}"
    );
    assert!(!stdout.contains("result 0"), "the copy must fail: {stdout}");
    assert!(
        stderr.contains("is a device address of the isolated device, not host memory"),
        "{stderr}"
    );
}

#[test]
fn unified_shared_memory_is_refused_with_the_reason() {
    let dir = scratch("isolated-usm");
    let exe = dir.join("requires_usm");
    compile_offload_sources(&[&fixture("isolated/requires_usm.c")], &exe, false, &[]);
    let (out, stdout, _) = run(&exe, Mode::InProcess, &[]);
    assert!(out.status.success() && stdout.contains("x 1"));
    let (out, stdout, stderr) = run(&exe, Mode::Isolated, &[]);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("`requires unified_shared_memory`")
            && stderr.contains("shares no memory with the host process"),
        "{stderr}"
    );
}
