//! The report: with `OMPTARGET_RS_CUDA_STANDIN_LOG=<file>`, one JSON object per line,
//! appended (the file is opened with O_APPEND, each line written whole and unbuffered,
//! so several processes can share one file). Every object has `"event"` and `"pid"`;
//! the events are listed in the crate's docs (lib.rs) and README.md.

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

/// The environment variable naming the report file.
pub const LOG_ENV: &str = "OMPTARGET_RS_CUDA_STANDIN_LOG";

struct Report {
    file: Option<File>,
    /// Error events so far, per driver call (the `nth` of each error event).
    errors: HashMap<String, u64>,
}

fn report() -> &'static Mutex<Report> {
    static REPORT: OnceLock<Mutex<Report>> = OnceLock::new();
    REPORT.get_or_init(|| {
        let file = std::env::var_os(LOG_ENV).and_then(|path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .ok()
        });
        Mutex::new(Report {
            file,
            errors: HashMap::new(),
        })
    })
}

fn lock() -> MutexGuard<'static, Report> {
    report().lock().unwrap_or_else(|e| e.into_inner())
}

/// Append one event: `fields` (an object) plus `"event"` and `"pid"`.
pub fn event(name: &str, fields: Value) {
    let mut report = lock();
    write(&mut report, name, fields);
}

/// Whether there is a report to write to.
pub fn enabled() -> bool {
    lock_patiently(report()).is_some_and(|r| r.file.is_some())
}

/// [`event`] for an exit handler: the process may be exiting while another thread is
/// inside a driver call, so the report's lock is only tried for a while (lines are
/// short: its holder lets go within microseconds); the event is dropped rather than
/// hang the exit.
pub fn event_at_exit(name: &str, fields: Value) {
    if let Some(mut report) = lock_patiently(report()) {
        write(&mut report, name, fields);
    }
}

/// `mutex` locked (poisoned or not), trying for at most a second: None if another
/// thread held it all that time.
pub fn lock_patiently<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    let start = Instant::now();
    loop {
        match mutex.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) if start.elapsed() > PATIENCE => return None,
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_micros(200)),
        }
    }
}

/// How long [`lock_patiently`] tries.
const PATIENCE: Duration = Duration::from_secs(1);

fn write(report: &mut Report, name: &str, fields: Value) {
    let Some(file) = report.file.as_mut() else {
        return;
    };
    let mut object = Map::new();
    object.insert("event".into(), json!(name));
    object.insert("pid".into(), json!(std::process::id()));
    if let Value::Object(rest) = fields {
        object.extend(rest);
    }
    let mut line = Value::Object(object).to_string();
    line.push('\n');
    // One write of the whole line; a report that cannot be written is not the driver's
    // failure.
    let _ = file.write_all(line.as_bytes());
}

/// Append an `error` event for a call that returns `code`; counts it per call.
pub fn error(call: &str, code: u32, detail: &str) {
    let mut report = lock();
    let nth = report.errors.entry(call.to_owned()).or_insert(0);
    *nth += 1;
    let nth = *nth;
    write(
        &mut report,
        "error",
        json!({
            "call": call,
            "error": crate::errors::name(code),
            "code": code,
            "detail": detail,
            "nth": nth,
        }),
    );
}

/// The `init` event (once per process, at the first cuInit): the executable and where
/// it is mapped, so a reader can turn the process's host addresses back into the
/// executable's symbol values.
pub fn init(devices: usize, sm: u32) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let exe = std::fs::read_link("/proc/self/exe").ok();
        let base = exe.as_deref().and_then(executable_load_base);
        event(
            "init",
            json!({
                "exe": exe.map(|p| p.display().to_string()),
                "load_base": base,
                "devices": devices,
                "sm": sm,
            }),
        );
    });
}

/// The start of the first mapping of `exe` in /proc/self/maps.
fn executable_load_base(exe: &std::path::Path) -> Option<u64> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    first_mapping_of(&maps, &exe.display().to_string())
}

/// The start address of the first line of `maps` (the /proc/PID/maps format) whose
/// path is `path`.
pub fn first_mapping_of(maps: &str, path: &str) -> Option<u64> {
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let range = fields.next()?;
        let mapped = fields.nth(4)?;
        (mapped == path).then_some(())?;
        u64::from_str_radix(range.split('-').next()?, 16).ok()
    })
}

/// Bytes as lowercase hex (device environments in the launch events).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_mapping_of_a_file() {
        let maps = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 123 /usr/bin/prog
55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:01 123 /usr/bin/prog
7f0000000000-7f0000001000 rw-p 00000000 00:00 0
7f0000001000-7f0000002000 r--p 00000000 fe:01 9 /usr/lib/libc.so.6
";
        assert_eq!(
            first_mapping_of(maps, "/usr/bin/prog"),
            Some(0x55d0_c0a0_0000)
        );
        assert_eq!(first_mapping_of(maps, "/usr/bin/other"), None);
    }

    #[test]
    fn this_process_has_a_load_base() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(executable_load_base(&exe).is_some_and(|b| b > 0));
    }

    #[test]
    fn a_lock_held_elsewhere_is_given_up_on_and_a_poisoned_one_taken() {
        let mutex = Mutex::new(1);
        let held = mutex.lock().unwrap();
        let start = Instant::now();
        assert!(lock_patiently(&mutex).is_none());
        assert!(start.elapsed() >= PATIENCE);
        drop(held);
        assert_eq!(lock_patiently(&mutex).map(|g| *g), Some(1));
        let _ = std::panic::catch_unwind(|| {
            let _guard = mutex.lock().unwrap();
            panic!("poison it");
        });
        assert!(mutex.is_poisoned());
        assert_eq!(lock_patiently(&mutex).map(|g| *g), Some(1));
    }

    #[test]
    fn hex_is_two_digits_per_byte() {
        assert_eq!(hex(&[0, 0xab, 7]), "00ab07");
    }
}
