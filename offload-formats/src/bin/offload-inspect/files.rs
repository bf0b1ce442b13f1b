//! The files a bundler run reads and writes: outputs that appear whole or not at all,
//! and inputs read in place.

use crate::{fail, io_message, read, CliResult, Failure};

pub fn write_file(path: &str, data: &[u8]) -> CliResult {
    let mut out = Output::create(path)?;
    out.write_all(data)?;
    out.commit()
}

/// A new file at the first of `path_for(0)`, `path_for(1)`, ... that does not exist yet
/// (created exclusively, so no other run's file is taken over), opened for writing.
pub fn create_new_file(
    path_for: impl Fn(u32) -> std::path::PathBuf,
) -> std::io::Result<(std::fs::File, std::path::PathBuf)> {
    for n in 0u32.. {
        let path = path_for(n);
        match std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("u32 temporary names exhausted")
}

/// An output file that appears whole or not at all: written to a temporary file beside
/// it and renamed over it by [`Output::commit`]; dropped uncommitted (an error on the
/// way), the temporary file is removed. Written directly instead when `path` is `-`
/// (stdout), exists and is not a regular file (a device or FIFO, which a rename would
/// replace), or its folder does not let us create a file there.
pub struct Output {
    path: String,
    sink: Sink,
    /// The temporary file, until it is renamed.
    temp: Option<std::path::PathBuf>,
    /// What the temporary file becomes: `path`, or the file a link at `path` names.
    rename_to: std::path::PathBuf,
}

pub enum Sink {
    File(std::fs::File),
    Stdout(std::io::StdoutLock<'static>),
}

impl Output {
    pub fn create(path: &str) -> CliResult<Output> {
        let err = |e: std::io::Error| Failure(format!("'{path}': {}", io_message(&e)));
        if path == "-" {
            return Ok(Output {
                path: path.to_owned(),
                sink: Sink::Stdout(std::io::stdout().lock()),
                temp: None,
                rename_to: path.into(),
            });
        }
        let existing = std::fs::metadata(path).ok();
        let direct = || -> CliResult<Output> {
            Ok(Output {
                path: path.to_owned(),
                sink: Sink::File(std::fs::File::create(path).map_err(err)?),
                temp: None,
                rename_to: path.into(),
            })
        };
        if existing.as_ref().is_some_and(|m| !m.is_file()) {
            return direct();
        }
        // A symbolic link is written through, as before: the rename goes to its target.
        let resolved = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(path) {
                Ok(real) => real,
                Err(_) => return direct(),
            },
            _ => std::path::PathBuf::from(path),
        };
        let target = resolved.as_path();
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        let name = target.file_name().map_or_else(
            || std::ffi::OsString::from("output"),
            std::ffi::OsStr::to_os_string,
        );
        let temp_name = |n: u32| {
            let mut temp_name = std::ffi::OsString::from(".");
            temp_name.push(&name);
            temp_name.push(format!(".offload-inspect-{}-{n}.tmp", std::process::id()));
            dir.join(temp_name)
        };
        match create_new_file(temp_name) {
            Ok((file, temp)) => {
                // Replacing a file keeps its mode, as writing into it would.
                if let Some(m) = &existing {
                    let _ = file.set_permissions(m.permissions());
                }
                Ok(Output {
                    path: path.to_owned(),
                    sink: Sink::File(file),
                    temp: Some(temp),
                    rename_to: resolved,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => direct(),
            Err(e) => Err(err(e)),
        }
    }

    fn fail(&self, e: std::io::Error) -> Failure {
        Failure(format!("'{}': {}", self.path, io_message(&e)))
    }

    /// Where another program should write this output: the temporary file (renamed
    /// into place by [`Output::commit`]), else the path itself (`-` is stdout).
    pub fn path_for_tool(&self) -> String {
        match &self.temp {
            Some(temp) => temp.to_string_lossy().into_owned(),
            None => self.path.clone(),
        }
    }

    /// The file being written, where it is a regular file (which can seek back).
    pub fn seekable_file(&self) -> Option<&std::fs::File> {
        match &self.sink {
            Sink::File(f) if f.metadata().is_ok_and(|m| m.is_file()) => Some(f),
            _ => None,
        }
    }

    pub fn write_all(&mut self, data: &[u8]) -> CliResult {
        use std::io::Write;
        match &mut self.sink {
            Sink::File(f) => f.write_all(data),
            Sink::Stdout(s) => s.write_all(data),
        }
        .map_err(|e| self.fail(e))
    }

    /// `n` zero bytes (alignment padding), through a fixed buffer.
    pub fn write_zeros(&mut self, n: u64) -> CliResult {
        let zeros = [0u8; 4096];
        let mut left = n;
        while left > 0 {
            let k = left.min(zeros.len() as u64) as usize;
            self.write_all(&zeros[..k])?;
            left -= k as u64;
        }
        Ok(())
    }

    /// Copy exactly `size` bytes of `input` (read from its current position) here.
    /// `std::io::copy` from a `Take<&File>` into a `File` or stdout is done by the
    /// kernel on Linux (`copy_file_range`, `sendfile` or `splice`, falling back to a
    /// fixed buffer), so the bytes never pass through a buffer that grows with them.
    pub fn copy_from(&mut self, input: &Source, size: u64) -> CliResult {
        let copied = match (&input.kind, &mut self.sink) {
            (SourceKind::Bytes(b), _) => {
                let b = b.get(input.start as usize..).unwrap_or_default();
                let b = &b[..b.len().min(size as usize)];
                self.write_all(b)?;
                b.len() as u64
            }
            (SourceKind::File(f), sink) => {
                use std::io::Read;
                let mut from = f.take(size);
                match sink {
                    Sink::File(out) => std::io::copy(&mut from, out),
                    Sink::Stdout(out) => std::io::copy(&mut from, out),
                }
                .map_err(|e| {
                    Failure(format!(
                        "copying '{}' to '{}': {}",
                        input.path,
                        self.path,
                        io_message(&e)
                    ))
                })?
            }
        };
        if copied != size {
            return fail(format!(
                "'{}': ended after {copied} of the {size} bytes to copy (did it change while being read?)",
                input.path
            ));
        }
        Ok(())
    }

    /// Flush and rename the temporary file over the output.
    pub fn commit(mut self) -> CliResult {
        use std::io::Write;
        match &mut self.sink {
            Sink::File(_) => Ok(()),
            Sink::Stdout(s) => s.flush(),
        }
        .map_err(|e| self.fail(e))?;
        if let Some(temp) = self.temp.take() {
            if let Err(e) = std::fs::rename(&temp, &self.rename_to) {
                let _ = std::fs::remove_file(&temp);
                return Err(self.fail(e));
            }
        }
        Ok(())
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Some(temp) = self.temp.take() {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// An input read in place: a regular file, positioned at `start`, whose length comes
/// from its metadata; anything else (a FIFO, a character device) is read into memory
/// first, as it has no length to put in a header.
pub struct Source {
    pub path: String,
    pub kind: SourceKind,
    /// Where the next copy starts (for `Bytes`; a `File` keeps its own position).
    pub start: u64,
    pub len: u64,
}

pub enum SourceKind {
    File(std::fs::File),
    Bytes(Vec<u8>),
}

impl Source {
    pub fn open(path: &str) -> CliResult<Source> {
        let err = |e: std::io::Error| Failure(format!("'{path}': {}", io_message(&e)));
        let file = std::fs::File::open(path).map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        if meta.is_file() {
            return Ok(Source {
                path: path.to_owned(),
                kind: SourceKind::File(file),
                start: 0,
                len: meta.len(),
            });
        }
        let bytes = read(path)?;
        Ok(Source {
            path: path.to_owned(),
            len: bytes.len() as u64,
            kind: SourceKind::Bytes(bytes),
            start: 0,
        })
    }

    /// Can [`Source::reopen`] give a second reader?
    pub fn can_reopen(&self) -> bool {
        matches!(self.kind, SourceKind::File(_))
    }

    /// A second reader of the same file with its own position: the open file itself
    /// reopened through `/proc/self/fd` (not its path, which may name another file by
    /// now), else the path where there is no /proc.
    pub fn reopen(&self) -> CliResult<Source> {
        use std::os::fd::AsRawFd;
        let SourceKind::File(f) = &self.kind else {
            return fail(format!(
                "'{}': only a regular file can be read twice",
                self.path
            ));
        };
        let own = format!("/proc/self/fd/{}", f.as_raw_fd());
        let file = std::fs::File::open(&own)
            .or_else(|_| std::fs::File::open(&self.path))
            .map_err(|e| Failure(format!("'{}': {}", self.path, io_message(&e))))?;
        Ok(Source {
            path: self.path.clone(),
            kind: SourceKind::File(file),
            start: 0,
            len: self.len,
        })
    }

    /// Position the next copy at `offset`.
    pub fn seek(&mut self, offset: u64) -> CliResult {
        use std::io::Seek;
        self.start = offset;
        if let SourceKind::File(f) = &mut self.kind {
            f.seek(std::io::SeekFrom::Start(offset))
                .map_err(|e| Failure(format!("'{}': {}", self.path, io_message(&e))))?;
        }
        Ok(())
    }

    /// Up to `n` bytes from the start (the magic), leaving the position at 0.
    pub fn prefix(&mut self, n: usize) -> CliResult<Vec<u8>> {
        use std::io::Read;
        let mut buf = Vec::with_capacity(n);
        if let SourceKind::File(f) = &mut self.kind {
            f.take(n as u64)
                .read_to_end(&mut buf)
                .map_err(|e| Failure(format!("'{}': {}", self.path, io_message(&e))))?;
        } else if let SourceKind::Bytes(b) = &self.kind {
            buf.extend_from_slice(&b[..b.len().min(n)]);
        }
        self.seek(0)?;
        Ok(buf)
    }
}
