//! `/etc/ld.so.cache` as the dynamic loader reads it after LD_LIBRARY_PATH and the
//! caller's RUNPATH: file name -> path, for this machine's kind of library. Only
//! glibc's current format (`glibc-ld.so.cache1.1`, the only one glibc 2.32 and later
//! write) is read.

use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
/// magic, nlibs, len_strings, flags + padding, extension_offset, 3 unused words.
const HEADER: usize = MAGIC.len() + 4 + 4 + 4 + 4 + 12;
/// flags, key, value, osversion (u32 each), hwcap (u64).
const ENTRY: usize = 24;
/// `FLAG_ELF_LIBC6`, and on x86_64 `FLAG_X8664_LIB64`: the entries this loader takes.
const FLAG_TYPE_MASK: i32 = 0x00ff;
const FLAG_ELF_LIBC6: i32 = 0x0003;
const FLAG_REQUIRED_MASK: i32 = 0xff00;
#[cfg(target_arch = "x86_64")]
const FLAG_THIS_ARCH: Option<i32> = Some(0x0300);
#[cfg(not(target_arch = "x86_64"))]
const FLAG_THIS_ARCH: Option<i32> = None;

pub const DEFAULT_PATH: &str = "/etc/ld.so.cache";

/// The cache's entries for this machine, in the file's order.
#[derive(Debug, Default)]
pub struct LdCache {
    entries: Vec<(String, PathBuf)>,
}

impl LdCache {
    pub fn read(path: &Path) -> Option<LdCache> {
        parse(&std::fs::read(path).ok()?)
    }

    /// The path the cache gives for the file name `name`.
    pub fn lookup(&self, name: &str) -> Option<&Path> {
        self.entries
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, path)| path.as_path())
    }
}

/// The entries of a cache file (None: not the current format, or cut short).
pub fn parse(bytes: &[u8]) -> Option<LdCache> {
    if !bytes.starts_with(MAGIC) {
        return None;
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let count = u32_at(MAGIC.len())? as usize;
    let mut entries = Vec::with_capacity(count.min(1 << 16));
    for i in 0..count {
        let at = HEADER + i * ENTRY;
        let flags = u32_at(at)? as i32;
        if !for_this_machine(flags) {
            continue;
        }
        // The key and value are offsets from the start of the file.
        let key = c_string(bytes, u32_at(at + 4)? as usize)?;
        let value = c_string(bytes, u32_at(at + 8)? as usize)?;
        entries.push((key, PathBuf::from(value)));
    }
    Some(LdCache { entries })
}

fn for_this_machine(flags: i32) -> bool {
    flags & FLAG_TYPE_MASK == FLAG_ELF_LIBC6
        && FLAG_THIS_ARCH.is_none_or(|arch| flags & FLAG_REQUIRED_MASK == arch)
}

fn c_string(bytes: &[u8], at: usize) -> Option<String> {
    let rest = bytes.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    String::from_utf8(rest[..end].to_vec()).ok()
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A cache file in glibc's format holding `entries` (flags, name, path).
    pub fn cache_bytes(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let strings_at = HEADER + entries.len() * ENTRY;
        let mut strings = Vec::new();
        let mut table = Vec::new();
        for (flags, key, value) in entries {
            let key_at = strings_at + strings.len();
            strings.extend_from_slice(key.as_bytes());
            strings.push(0);
            let value_at = strings_at + strings.len();
            strings.extend_from_slice(value.as_bytes());
            strings.push(0);
            table.extend_from_slice(&flags.to_le_bytes());
            table.extend_from_slice(&(key_at as u32).to_le_bytes());
            table.extend_from_slice(&(value_at as u32).to_le_bytes());
            table.extend_from_slice(&[0; 12]);
        }
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&[2, 0, 0, 0]);
        bytes.extend_from_slice(&[0; 16]);
        bytes.extend(table);
        bytes.extend(strings);
        bytes
    }

    #[test]
    fn entries_for_this_machine_are_found_by_file_name() {
        let bytes = cache_bytes(&[
            (0x0303, "libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"),
            // An i386 library of the same name (FLAG_ELF_LIBC6 alone) is not this
            // loader's.
            (0x0003, "libfoo.so", "/lib/i386-linux-gnu/libfoo.so"),
        ]);
        let cache = parse(&bytes).unwrap();
        assert_eq!(
            cache.lookup("libz.so.1"),
            Some(Path::new("/lib/x86_64-linux-gnu/libz.so.1"))
        );
        assert_eq!(cache.lookup("libfoo.so"), None);
        assert_eq!(cache.lookup("libz.so"), None);
    }

    #[test]
    fn a_file_of_another_format_or_cut_short_is_none() {
        assert!(parse(b"ld.so-1.7.0\0\0\0\0").is_none());
        let bytes = cache_bytes(&[(0x0303, "libz.so.1", "/lib/libz.so.1")]);
        assert!(parse(&bytes[..HEADER + 10]).is_none());
    }

    #[test]
    fn this_machines_cache_reads() {
        let Some(cache) = LdCache::read(Path::new(DEFAULT_PATH)) else {
            println!("no readable {DEFAULT_PATH} here");
            return;
        };
        assert!(cache.lookup("libc.so.6").is_some(), "{cache:?}");
    }
}
