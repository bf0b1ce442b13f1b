//! The isolated device process's start: the variable that asks for it, and the command
//! line the plugin ([`super::process`]) starts it with and it ([`super::server`]) reads.

use super::address_space::{Layout, Window};
use std::collections::HashMap;

/// Set to 1 to run the x86_64 device in its own process.
pub const ISOLATED_ENV: &str = "OMPTARGET_RS_ISOLATED";

/// What the plugin passes on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub socket_fd: i32,
    /// Device memory, mapped at the window's base.
    pub arena_fd: i32,
    pub arena_size: u64,
    /// Host memory the device reaches, mapped right after it (at the same address as
    /// in the host).
    pub host_arena_fd: i32,
    pub host_arena_size: u64,
    /// The doorbell page's memory file ([`super::doorbell`]).
    pub doorbell_fd: i32,
    pub window: Window,
    pub host_pid: u32,
    /// How many times this process has exec'd itself for a new layout.
    pub attempt: u32,
}

impl Args {
    /// How the window is shared out (the plugin computes the same).
    pub fn layout(&self) -> Layout {
        Layout {
            window: self.window,
            device_memory_bytes: self.arena_size,
            host_memory_bytes: self.host_arena_size,
        }
    }

    pub fn to_strings(&self) -> Vec<String> {
        vec![
            format!("--socket={}", self.socket_fd),
            format!("--arena={}", self.arena_fd),
            format!("--arena-size={:#x}", self.arena_size),
            format!("--host-arena={}", self.host_arena_fd),
            format!("--host-arena-size={:#x}", self.host_arena_size),
            format!("--doorbell={}", self.doorbell_fd),
            format!("--window={:#x}:{:#x}", self.window.base, self.window.size),
            format!("--host-pid={}", self.host_pid),
            format!("--attempt={}", self.attempt),
        ]
    }

    pub fn parse(args: &[String]) -> Result<Args, String> {
        let mut values = HashMap::new();
        for a in args {
            let (k, v) = a
                .strip_prefix("--")
                .and_then(|a| a.split_once('='))
                .ok_or_else(|| format!("unexpected argument `{a}`"))?;
            values.insert(k.to_owned(), v.to_owned());
        }
        let get = |k: &str| {
            values
                .get(k)
                .cloned()
                .ok_or_else(|| format!("missing --{k}"))
        };
        let num = |k: &str| -> Result<u64, String> {
            let v = get(k)?;
            parse_number(&v).ok_or_else(|| format!("--{k}: `{v}` is not a number"))
        };
        let window = get("window")?;
        let (base, size) = window
            .split_once(':')
            .and_then(|(b, s)| Some((parse_number(b)?, parse_number(s)?)))
            .ok_or_else(|| format!("--window: `{window}` is not BASE:SIZE"))?;
        let small = |k: &str| -> Result<u32, String> {
            u32::try_from(num(k)?).map_err(|_| format!("--{k} out of range"))
        };
        Ok(Args {
            socket_fd: small("socket")? as i32,
            arena_fd: small("arena")? as i32,
            arena_size: num("arena-size")?,
            host_arena_fd: small("host-arena")? as i32,
            host_arena_size: num("host-arena-size")?,
            doorbell_fd: small("doorbell")? as i32,
            window: Window { base, size },
            host_pid: small("host-pid")?,
            attempt: small("attempt")?,
        })
    }
}

fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip_and_bad_ones_are_named() {
        let args = Args {
            socket_fd: 3,
            arena_fd: 4,
            arena_size: 1 << 36,
            host_arena_fd: 5,
            host_arena_size: 1 << 34,
            doorbell_fd: 6,
            window: Window {
                base: 0x2000_0000_0000,
                size: 1 << 38,
            },
            host_pid: 1234,
            attempt: 2,
        };
        assert_eq!(Args::parse(&args.to_strings()).unwrap(), args);
        let err = Args::parse(&["--socket=3".into()]).unwrap_err();
        assert!(err.starts_with("missing --"), "{err}");
        let err = Args::parse(&["hello".into()]).unwrap_err();
        assert!(err.contains("unexpected argument `hello`"), "{err}");
    }
}
