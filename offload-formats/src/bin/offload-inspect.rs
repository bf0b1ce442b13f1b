//! `offload-inspect`: look inside offload containers.
//!
//! * `offload-inspect bundle|unbundle|list <clang-offload-bundler options>`: a drop-in
//!   for clang-offload-bundler (same options, same bytes out, same listing, exit 1 on
//!   error) for the binary (`bc`, `gch`, `ast`, `o` with a non-object input) and text
//!   (`ll`, `s`, `i`, `ii`, `cui`, `hipi`, `d`) types. Plain bundles stream: inputs are
//!   copied into the bundle, and code objects out of it, without being held in memory
//!   (`Output`, `Source`); every output appears whole or not at all.
//! * `offload-inspect entries FILE`: the host offload entries of an executable/object.
//! * `offload-inspect images FILE`: every embedded device image.
//!
//! `--json` (anywhere on the command line) switches every command to JSON output.

#![forbid(unsafe_code)]

use offload_formats::bundle::{self, text, Bundle, BundleEntryId};
use offload_formats::compressed::{self, CompressedBundle, Method};
use offload_formats::entries::{self, read_host_entries};
use offload_formats::image::{self, find_images};
use offload_formats::string_map_order::string_map_order;
use std::process::ExitCode;

/// A failure reported as `offload-inspect: error: <message>` with exit status 1.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

type CliResult<T = ()> = Result<T, Failure>;

fn fail<T>(msg: impl Into<String>) -> CliResult<T> {
    Err(Failure(msg.into()))
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json" || a == "-json");
    args.retain(|a| a != "--json" && a != "-json");
    let Some(command) = args.first().cloned() else {
        eprintln!("{USAGE}");
        return ExitCode::from(1);
    };
    let rest = &args[1..];
    let result = match command.as_str() {
        "bundle" | "unbundle" | "list" => {
            BundlerOptions::parse(rest).and_then(|o| run_bundler(&command, &o, json))
        }
        "entries" => one_file(rest).and_then(|f| run_entries(&f, json)),
        "images" => one_file(rest).and_then(|f| run_images(&f, json)),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => fail(format!("unknown command `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("offload-inspect: error: {msg}");
            ExitCode::from(1)
        }
    }
}

const USAGE: &str =
    "usage: offload-inspect bundle|unbundle|list <clang-offload-bundler options> [--json]
       offload-inspect entries FILE [--json]
       offload-inspect images FILE [--json]";

fn one_file(rest: &[String]) -> CliResult<String> {
    match rest {
        [f] => Ok(f.clone()),
        _ => fail(format!("expected exactly one FILE\n{USAGE}")),
    }
}

fn read(path: &str) -> CliResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| Failure(format!("'{path}': {}", io_message(&e))))
}

/// LLVM-style I/O error text ("No such file or directory").
fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

fn write_file(path: &str, data: &[u8]) -> CliResult {
    let mut out = Output::create(path)?;
    out.write_all(data)?;
    out.commit()
}

/// An output file that appears whole or not at all: written to a temporary file beside
/// it and renamed over it by [`Output::commit`]; dropped uncommitted (an error on the
/// way), the temporary file is removed. Written directly instead when `path` is `-`
/// (stdout), exists and is not a regular file (a device or FIFO, which a rename would
/// replace), or its folder does not let us create a file there.
struct Output {
    path: String,
    sink: Sink,
    /// The temporary file, until it is renamed.
    temp: Option<std::path::PathBuf>,
    /// What the temporary file becomes: `path`, or the file a link at `path` names.
    rename_to: std::path::PathBuf,
}

enum Sink {
    File(std::fs::File),
    Stdout(std::io::StdoutLock<'static>),
}

impl Output {
    fn create(path: &str) -> CliResult<Output> {
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
        for n in 0u32.. {
            let mut temp_name = std::ffi::OsString::from(".");
            temp_name.push(&name);
            temp_name.push(format!(".offload-inspect-{}-{n}.tmp", std::process::id()));
            let temp = dir.join(temp_name);
            match std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&temp)
            {
                Ok(file) => {
                    // Replacing a file keeps its mode, as writing into it would.
                    if let Some(m) = &existing {
                        let _ = file.set_permissions(m.permissions());
                    }
                    return Ok(Output {
                        path: path.to_owned(),
                        sink: Sink::File(file),
                        temp: Some(temp),
                        rename_to: resolved,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return direct(),
                Err(e) => return Err(err(e)),
            }
        }
        unreachable!("u32 temporary names exhausted")
    }

    fn fail(&self, e: std::io::Error) -> Failure {
        Failure(format!("'{}': {}", self.path, io_message(&e)))
    }

    fn write_all(&mut self, data: &[u8]) -> CliResult {
        use std::io::Write;
        match &mut self.sink {
            Sink::File(f) => f.write_all(data),
            Sink::Stdout(s) => s.write_all(data),
        }
        .map_err(|e| self.fail(e))
    }

    /// `n` zero bytes (alignment padding), through a fixed buffer.
    fn write_zeros(&mut self, n: u64) -> CliResult {
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
    fn copy_from(&mut self, input: &Source, size: u64) -> CliResult {
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
    fn commit(mut self) -> CliResult {
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
struct Source {
    path: String,
    kind: SourceKind,
    /// Where the next copy starts (for `Bytes`; a `File` keeps its own position).
    start: u64,
    len: u64,
}

enum SourceKind {
    File(std::fs::File),
    Bytes(Vec<u8>),
}

impl Source {
    fn open(path: &str) -> CliResult<Source> {
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

    /// Position the next copy at `offset`.
    fn seek(&mut self, offset: u64) -> CliResult {
        use std::io::Seek;
        self.start = offset;
        if let SourceKind::File(f) = &mut self.kind {
            f.seek(std::io::SeekFrom::Start(offset))
                .map_err(|e| Failure(format!("'{}': {}", self.path, io_message(&e))))?;
        }
        Ok(())
    }

    /// Up to `n` bytes from the start (the magic), leaving the position at 0.
    fn prefix(&mut self, n: usize) -> CliResult<Vec<u8>> {
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

/// clang-offload-bundler's options. LLVM's command line accepts `-name=value`,
/// `--name=value` and `-name value`; clap does not do single-dash long options, so
/// argv is normalised here.
#[derive(Default, Debug)]
struct BundlerOptions {
    file_type: Option<String>,
    targets: Vec<String>,
    inputs: Vec<String>,
    outputs: Vec<String>,
    compress: bool,
    compression_level: Option<i32>,
    bundle_align: u64,
    allow_missing_bundles: bool,
    hip_openmp_compatible: bool,
}

impl BundlerOptions {
    fn parse(args: &[String]) -> CliResult<Self> {
        let mut o = BundlerOptions {
            bundle_align: 1,
            ..Default::default()
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let Some(stripped) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
                return fail(format!("unexpected positional argument '{arg}'"));
            };
            let (name, inline) = match stripped.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (stripped, None),
            };
            let mut value = |name: &str| -> CliResult<String> {
                match inline.clone().or_else(|| it.next().cloned()) {
                    Some(v) => Ok(v),
                    None => fail(format!("for the --{name} option: requires a value!")),
                }
            };
            let comma_list = |v: String| -> Vec<String> {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            };
            match name {
                "type" => o.file_type = Some(value(name)?),
                "targets" => o.targets.extend(comma_list(value(name)?)),
                "input" => o.inputs.push(value(name)?),
                "inputs" => o.inputs.extend(comma_list(value(name)?)),
                "output" => o.outputs.push(value(name)?),
                "outputs" => o.outputs.extend(comma_list(value(name)?)),
                "compress" => o.compress = true,
                "compression-level" => {
                    let v = value(name)?;
                    o.compression_level = Some(v.parse().map_err(|_| {
                        Failure(format!("for the --compression-level option: '{v}' value invalid for integer argument!"))
                    })?)
                }
                "bundle-align" => {
                    let v = value(name)?;
                    o.bundle_align = v.parse().map_err(|_| {
                        Failure(format!(
                            "for the --bundle-align option: '{v}' value invalid for uint argument!"
                        ))
                    })?
                }
                "allow-missing-bundles" => o.allow_missing_bundles = true,
                "hip-openmp-compatible" => o.hip_openmp_compatible = true,
                // Mode flags are implied by the subcommand; verbosity is not modelled.
                "list" | "unbundle" | "verbose" | "check-input-archive" => {}
                _ => return fail(format!("Unknown command line argument '{arg}'.")),
            }
        }
        // The bundler's environment switch for compression.
        let env_ignored = std::env::var_os("OFFLOAD_BUNDLER_IGNORE_ENV_VAR").is_some();
        if !env_ignored && std::env::var_os("OFFLOAD_BUNDLER_COMPRESS").is_some() {
            o.compress = true;
        }
        if o.compression_level.is_none() && !env_ignored {
            if let Some(level) = std::env::var("OFFLOAD_BUNDLER_COMPRESSION_LEVEL")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                o.compression_level = Some(level);
            }
        }
        Ok(o)
    }
}

/// How a `-type` is stored.
enum Format {
    Binary,
    /// `-type=o`: code objects in ELF sections when the file is an object, else binary.
    Object,
    Text(&'static str),
}

impl Format {
    /// Is `bytes` an object-file bundle for this format?
    fn is_object_bundle(&self, bytes: &[u8]) -> bool {
        matches!(self, Format::Object) && bytes.starts_with(b"\x7fELF")
    }
}

fn format_of(file_type: &str, mode: &str) -> CliResult<Format> {
    if let Some(comment) = text::comment_for_type(file_type) {
        return Ok(Format::Text(comment));
    }
    match file_type {
        "bc" | "gch" | "ast" => Ok(Format::Binary),
        "o" => Ok(Format::Object),
        "a" if mode == "bundle" => fail("Archive files are only supported for unbundling"),
        "a" => fail("archives of bundles (-type=a) are not supported by offload-inspect"),
        other => fail(format!("'{other}': invalid file type specified")),
    }
}

fn run_bundler(mode: &str, o: &BundlerOptions, json: bool) -> CliResult {
    let Some(file_type) = o.file_type.as_deref() else {
        return fail("for the --type option: must be specified at least once!");
    };
    let format = format_of(file_type, mode)?;
    if mode == "list" {
        if o.inputs.len() != 1 {
            return fail("only one input file supported for -list");
        }
        return list(&o.inputs[0], &format, json);
    }
    // The bundler's checks, in its order.
    if o.outputs.is_empty() {
        return fail("no output file specified!");
    }
    if mode == "unbundle" && o.inputs.len() != 1 {
        return fail("only one input file supported in unbundling mode");
    }
    if mode == "bundle" && o.outputs.len() != 1 {
        return fail("only one output file supported in bundling mode");
    }
    if o.targets.is_empty() {
        return fail("for the --targets option: must be specified at least once!");
    }
    if mode == "bundle" && o.inputs.len() != o.targets.len() {
        return fail("number of input files and targets should match in bundling mode");
    }
    if mode == "unbundle" && o.outputs.len() != o.targets.len() {
        return fail("number of output files and targets should match in unbundling mode");
    }
    let mut ids = Vec::with_capacity(o.targets.len());
    for t in &o.targets {
        let id = BundleEntryId::parse(t).map_err(|_| {
            Failure("Targets need to follow the format '<offload kind>-<target triple>', where '<target triple>' follows the format '<kind>-<arch>-<vendor>-<os>-<env>[-<target id>[:target features]]'.".into())
        })?;
        if !id.is_known_kind() {
            return fail(format!(
                "invalid target '{t}', unknown offloading kind '{}'",
                id.kind
            ));
        }
        ids.push(id);
    }
    let normalized: Vec<String> = ids.iter().map(BundleEntryId::to_bundler_string).collect();
    let mut seen = std::collections::HashSet::new();
    if !normalized.iter().all(|n| seen.insert(n.as_str())) {
        return fail("Duplicate targets are not allowed");
    }
    if mode == "bundle" {
        bundle_files(o, &format, &ids, &normalized, json)
    } else {
        unbundle_files(o, &format, &ids, json)
    }
}

fn bundle_files(
    o: &BundlerOptions,
    format: &Format,
    ids: &[BundleEntryId],
    normalized: &[String],
    json: bool,
) -> CliResult {
    if o.inputs.len() != o.targets.len() {
        return fail("number of input files and targets should match in bundling mode");
    }
    if o.outputs.len() != 1 {
        return fail("only one output file supported in bundling mode");
    }
    let hosts = ids.iter().filter(|i| i.is_host()).count();
    if hosts != 1 {
        return fail(format!("expecting exactly one host target but got {hosts}"));
    }
    if let Some((a, b)) = conflicting_targets(&o.targets) {
        return fail(format!(
            "Cannot bundle inputs with conflicting targets: '{a}' and '{b}'"
        ));
    }
    let mut sources: Vec<Source> = o
        .inputs
        .iter()
        .map(|p| Source::open(p))
        .collect::<CliResult<_>>()?;
    let host = ids.iter().position(BundleEntryId::is_host).unwrap_or(0);
    if format.is_object_bundle(&sources[host].prefix(4)?) {
        // The bundler then writes an object with one section per code object (through
        // llvm-objcopy); we do not write objects.
        return fail("-type=o with an object-file host input (an object bundle) is not supported by offload-inspect bundle; use clang-offload-bundler");
    }
    let size = if o.compress {
        bundle_in_memory(o, format, &sources, normalized)?
    } else {
        bundle_streamed(o, format, &mut sources, normalized)?
    };
    if json {
        let v = serde_json::json!({
            "output": o.outputs[0],
            "size": size,
            "compressed": o.compress,
            "entries": normalized,
        });
        println!("{v}");
    }
    Ok(())
}

/// Write a plain bundle without holding its code objects: the header, computed from
/// the inputs' sizes, then each input copied in at its offset. Returns its size.
fn bundle_streamed(
    o: &BundlerOptions,
    format: &Format,
    sources: &mut [Source],
    normalized: &[String],
) -> CliResult<u64> {
    let mut out = Output::create(&o.outputs[0])?;
    let mut written = 0u64;
    match format {
        Format::Binary | Format::Object => {
            let sizes: Vec<(&str, u64)> = normalized
                .iter()
                .map(String::as_str)
                .zip(sources.iter().map(|s| s.len))
                .collect();
            let (header, offsets) = bundle::header(&sizes, o.bundle_align);
            out.write_all(&header)?;
            written += header.len() as u64;
            for (source, offset) in sources.iter().zip(offsets) {
                out.write_zeros(offset - written)?;
                out.copy_from(source, source.len)?;
                written = offset + source.len;
            }
        }
        Format::Text(comment) => {
            let (start, end) = text::markers(comment);
            for (id, source) in normalized.iter().zip(sources.iter()) {
                let start_line = format!("{start}{id}\n");
                let end_line = format!("{end}{id}\n");
                out.write_all(start_line.as_bytes())?;
                out.copy_from(source, source.len)?;
                out.write_all(end_line.as_bytes())?;
                written += (start_line.len() + end_line.len()) as u64 + source.len;
            }
        }
    }
    out.commit()?;
    Ok(written)
}

/// `-compress`: the plain bundle is built in memory and compressed in one piece, and
/// `unbundle` / `list` decompress a compressed bundle whole (`ParsedInput::load`).
///
/// Both could stream; it is not done yet. Writing: the CCOB header comes before the
/// payload and holds the total (compressed) size, the uncompressed size and the MD5 of
/// the whole plain bundle. The uncompressed size follows from the inputs' sizes and the
/// MD5 can be fed as the plain bundle streams into a zstd stream, but the total size is
/// known only at the end: the header must be written last by seeking back (a file, not
/// stdout) or the compressed payload held. And a streamed zstd frame (pledged content
/// size, long-distance matching, window log 27) should first be shown to give the bytes
/// this one-shot `ZSTD_compress2` gives (no test pins our compressed bytes today; the
/// README says they match clang-offload-bundler's only for small inputs). Reading:
/// every output has to stay a temporary file until the hash at the end matches, which
/// `Output` allows but which needs all outputs open at once. Until then `-compress`
/// holds the inputs, the plain bundle and the compressed bundle, and reading holds
/// both forms.
fn bundle_in_memory(
    o: &BundlerOptions,
    format: &Format,
    sources: &[Source],
    normalized: &[String],
) -> CliResult<u64> {
    let contents: Vec<Vec<u8>> = sources
        .iter()
        .map(|s| match &s.kind {
            SourceKind::Bytes(b) => Ok(b.clone()),
            SourceKind::File(_) => read(&s.path),
        })
        .collect::<CliResult<_>>()?;
    let entries: Vec<(&str, &[u8])> = normalized
        .iter()
        .map(String::as_str)
        .zip(contents.iter().map(Vec::as_slice))
        .collect();
    let out = match format {
        Format::Binary | Format::Object => bundle::write(&entries, o.bundle_align),
        Format::Text(comment) => text::write(&entries, comment),
    };
    let out = compressed::compress(&out, compression_version(), Method::Zstd, zstd_level(o))?;
    write_file(&o.outputs[0], &out)?;
    Ok(out.len() as u64)
}

/// The bundler's check (clang's `getConflictTargetIDCombination`) over the sorted set
/// of target strings: the part before the first `:` is the key; a later target with the
/// same key that specifies a feature the first one left as Any conflicts with it.
fn conflicting_targets(targets: &[String]) -> Option<(String, String)> {
    let sorted: std::collections::BTreeSet<&str> = targets.iter().map(String::as_str).collect();
    let mut first: std::collections::HashMap<&str, (&str, Vec<&str>)> =
        std::collections::HashMap::new();
    for id in sorted {
        let mut parts = id.split(':');
        let key = parts.next().unwrap_or("");
        let features: Vec<&str> = parts.map(|f| f.trim_end_matches(['+', '-'])).collect();
        match first.get(key) {
            None => {
                first.insert(key, (id, features));
            }
            Some((existing, known)) => {
                if features.iter().any(|f| !known.contains(f)) {
                    return Some(((*existing).to_owned(), id.to_owned()));
                }
            }
        }
    }
    None
}

/// `COMPRESSED_BUNDLE_FORMAT_VERSION` (2 or 3, default 3), as the bundler reads it.
fn compression_version() -> u16 {
    match std::env::var("COMPRESSED_BUNDLE_FORMAT_VERSION")
        .ok()
        .as_deref()
    {
        Some("2") => 2,
        Some("3") | None => 3,
        Some(other) => {
            eprintln!("Warning: Invalid value for COMPRESSED_BUNDLE_FORMAT_VERSION: {other}. Valid values are 2 or 3. Using default version 3.");
            3
        }
    }
}

/// The zstd level: the user's, else the bundler's default.
fn zstd_level(o: &BundlerOptions) -> i32 {
    o.compression_level.unwrap_or(DEFAULT_ZSTD_LEVEL)
}

/// The zstd level clang-offload-bundler 22 uses by default (its output matches ours at 3).
const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// An input to list or unbundle: the plain bundle bytes (decompressed when the file is a
/// compressed bundle).
struct ParsedInput {
    /// Owned plain bundle bytes (decompressed or read).
    bytes: Vec<u8>,
}

impl ParsedInput {
    fn load(path: &str) -> CliResult<ParsedInput> {
        let raw = read(path)?;
        let bytes = if compressed::is_compressed_bundle(&raw) {
            CompressedBundle::parse(&raw)?.decompress()?
        } else {
            raw
        };
        Ok(ParsedInput { bytes })
    }

    /// (ID, code) pairs in file order; empty when the input holds no bundle.
    fn entries(&self, format: &Format) -> CliResult<Vec<(&str, &[u8])>> {
        Ok(match format {
            f if f.is_object_bundle(&self.bytes) => bundle::object_bundle_entries(&self.bytes)?
                .into_iter()
                .map(|e| (e.id, e.data))
                .collect(),
            Format::Binary | Format::Object if bundle::is_bundle(&self.bytes) => {
                Bundle::parse(&self.bytes)?
                    .entries
                    .into_iter()
                    .map(|e| (e.id, e.data))
                    .collect()
            }
            Format::Binary | Format::Object => Vec::new(),
            Format::Text(comment) => text::parse(&self.bytes, comment)?
                .into_iter()
                .map(|e| (e.id, e.data))
                .collect(),
        })
    }
}

fn list(path: &str, format: &Format, json: bool) -> CliResult {
    let mut source = Source::open(path)?;
    let prefix = source.prefix(MAGIC_PREFIX)?;
    let ids: Vec<String> = if reads_in_place(format, &prefix) {
        let table = read_table(&mut source, format, &prefix)?;
        let ids: Vec<&str> = table.iter().map(|e| e.id.as_str()).collect();
        if let Format::Text(_) = format {
            ids.iter().map(|id| (*id).to_owned()).collect()
        } else {
            // The binary handler keeps IDs in a StringMap: list in its order.
            string_map_order(&ids)
                .into_iter()
                .map(|i| ids[i].to_owned())
                .collect()
        }
    } else {
        let input = ParsedInput::load(path)?;
        match format {
            Format::Binary | Format::Object
                if bundle::is_bundle(&input.bytes) && !format.is_object_bundle(&input.bytes) =>
            {
                Bundle::parse(&input.bytes)?
                    .listing_order()
                    .into_iter()
                    .map(|e| e.id.to_owned())
                    .collect()
            }
            _ => input
                .entries(format)?
                .into_iter()
                .map(|(id, _)| id.to_owned())
                .collect(),
        }
    };
    if json {
        println!("{}", serde_json::json!(ids));
    } else {
        for id in ids {
            println!("{id}");
        }
    }
    Ok(())
}

fn unbundle_files(
    o: &BundlerOptions,
    format: &Format,
    wanted: &[BundleEntryId],
    json: bool,
) -> CliResult {
    if o.inputs.len() != 1 {
        return fail("only one input file supported in unbundling mode");
    }
    if o.outputs.len() != o.targets.len() {
        return fail("number of output files and targets should match in unbundling mode");
    }
    let mut source = Source::open(&o.inputs[0])?;
    let prefix = source.prefix(MAGIC_PREFIX)?;
    // A plain binary or text bundle, or a file that is none (the host code object), is
    // read in place; compressed and object-file bundles are read into memory.
    let in_place = reads_in_place(format, &prefix);
    // Filled only when the input is read into memory.
    let mut input = ParsedInput { bytes: Vec::new() };
    let table;
    let entries: Vec<(&str, Code)> = if in_place {
        table = read_table(&mut source, format, &prefix)?;
        table
            .iter()
            .map(|e| {
                (
                    e.id.as_str(),
                    Code::Range {
                        offset: e.offset,
                        size: e.size,
                    },
                )
            })
            .collect()
    } else {
        input = ParsedInput::load(&o.inputs[0])?;
        input
            .entries(format)?
            .into_iter()
            .map(|(id, data)| (id, Code::Bytes(data)))
            .collect()
    };
    let object_bundle = !in_place && format.is_object_bundle(&input.bytes);
    // Work list of (wanted ID, output path) not yet satisfied.
    let mut pending: Vec<(&BundleEntryId, &str)> = wanted
        .iter()
        .zip(o.outputs.iter().map(String::as_str))
        .collect();
    let mut written: Vec<serde_json::Value> = Vec::new();
    let mut found_host = false;
    for (id_text, code) in &entries {
        if pending.is_empty() {
            break;
        }
        let Ok(code_object) = BundleEntryId::parse(id_text) else {
            continue;
        };
        let Some(pos) = pending
            .iter()
            .position(|(w, _)| code_object.is_code_object_compatible(w, o.hip_openmp_compatible))
        else {
            continue;
        };
        let (w, path) = pending.remove(pos);
        if code_object.is_host() && object_bundle {
            // The host code of an object bundle is the object minus the bundle sections,
            // which the bundler makes with llvm-objcopy.
            return fail("unbundling the host object of an object bundle (-type=o) is not supported by offload-inspect; use clang-offload-bundler");
        }
        let size = match code {
            Code::Bytes(data) => {
                write_file(path, data)?;
                data.len() as u64
            }
            Code::Range { offset, size } => {
                copy_range(&mut source, *offset, *size, path)?;
                *size
            }
        };
        found_host |= code_object.is_host();
        written.push(serde_json::json!({"target": w.to_bundler_string(), "bundle": id_text, "output": path, "size": size}));
    }
    if !pending.is_empty() && !o.allow_missing_bundles {
        let mut missing: Vec<String> = pending.iter().map(|(w, _)| w.to_bundler_string()).collect();
        missing.sort();
        missing.dedup();
        return fail(format!("Can't find bundles for{}", english_list(&missing)));
    }
    let nothing_found = pending.len() == wanted.len();
    for (w, path) in &pending {
        // No bundle at all: the input is taken to be the host code object.
        if nothing_found && w.is_host() {
            if in_place {
                let len = source.len;
                copy_range(&mut source, 0, len, path)?;
            } else {
                write_file(path, &input.bytes)?;
            }
        } else {
            write_file(path, &[])?;
        }
    }
    let host_wanted = wanted.iter().any(BundleEntryId::is_host);
    if !nothing_found && !found_host && host_wanted && !o.allow_missing_bundles {
        return fail("Can't find bundle for the host target");
    }
    if json {
        println!("{}", serde_json::json!({ "unbundled": written }));
    }
    Ok(())
}

/// Enough of the start of an input to tell its kind (bundle, CCOB or ELF magic).
const MAGIC_PREFIX: usize = bundle::MAGIC.len();

/// Is an input starting with `prefix` read in place (a plain binary or text bundle, or
/// no bundle at all), rather than into memory (compressed and object-file bundles)?
fn reads_in_place(format: &Format, prefix: &[u8]) -> bool {
    !compressed::is_compressed_bundle(prefix) && !format.is_object_bundle(prefix)
}

/// Where an entry's code object is: in memory, or a range of the input file.
enum Code<'a> {
    Bytes(&'a [u8]),
    Range { offset: u64, size: u64 },
}

/// Where the code objects of `source` (a plain binary or text bundle, read from its
/// start; `prefix` its first bytes) lie, with the errors `Bundle::parse` and
/// `text::parse` give; none when a binary input is no bundle.
fn read_table(
    source: &mut Source,
    format: &Format,
    prefix: &[u8],
) -> CliResult<Vec<bundle::EntryRange>> {
    let io = |e: std::io::Error| Failure(format!("'{}': {}", source.path, io_message(&e)));
    let len = source.len;
    let table = match (format, &source.kind) {
        (Format::Text(comment), SourceKind::File(f)) => {
            let mut f: &std::fs::File = f;
            text::scan(&mut f, len, comment).map_err(io)?
        }
        (Format::Text(comment), SourceKind::Bytes(b)) => {
            text::scan(&mut std::io::Cursor::new(&b[..]), len, comment).map_err(io)?
        }
        _ if !bundle::is_bundle(prefix) => Ok(Vec::new()),
        (_, SourceKind::File(f)) => {
            // Buffered: the table is read field by field.
            let mut r = std::io::BufReader::new(f);
            bundle::read_entry_table(&mut r, len).map_err(io)?
        }
        (_, SourceKind::Bytes(b)) => bundle::read_entry_table(&mut &b[..], len).map_err(io)?,
    };
    Ok(table?)
}

/// Copy `size` bytes at `offset` of `source` into the output `path`.
fn copy_range(source: &mut Source, offset: u64, size: u64, path: &str) -> CliResult {
    source.seek(offset)?;
    let mut out = Output::create(path)?;
    out.copy_from(source, size)?;
    out.commit()
}

/// " a", " a and b", " a, b, and c": the bundler's wording for its missing list.
fn english_list(items: &[String]) -> String {
    let mut s = String::new();
    let last = items.len().saturating_sub(1);
    for (i, item) in items.iter().enumerate() {
        if i != 0 && last > 1 {
            s.push(',');
        }
        s.push(' ');
        if i == last && i != 0 {
            s.push_str("and ");
        }
        s.push_str(item);
    }
    s
}

fn run_entries(path: &str, json: bool) -> CliResult {
    let bytes = read(path)?;
    let list = read_host_entries(&bytes)?;
    if json {
        let v: Vec<serde_json::Value> = list
            .iter()
            .map(|e| {
                serde_json::json!({
                    "layout": e.layout,
                    "offset": e.offset,
                    "version": e.version,
                    "kind": e.kind,
                    "flags": e.flags,
                    "flag_names": entries::flags::names(e.flags),
                    "role": e.role(),
                    "addr": e.addr,
                    "host_symbol": e.host_symbol,
                    "name": e.name,
                    "size": e.size,
                    "data": e.data,
                    "aux": e.aux,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:<18} {:<6} {:<10} {:<18} {:<6} {:<24} name",
        "role", "flags", "names", "addr", "size", "host symbol"
    );
    for e in &list {
        let role = format!("{:?}", e.role());
        let marker = if e.is_indirect() {
            format!(
                "{} -> device {}",
                e.host_symbol.as_deref().unwrap_or("?"),
                e.name
            )
        } else {
            e.name.clone()
        };
        println!(
            "{:<18} {:<6} {:<10} {:<18} {:<6} {:<24} {}",
            role,
            format!("{:#x}", e.flags),
            entries::flags::names(e.flags).join(","),
            format!("{:#x}", e.addr),
            e.size,
            e.host_symbol.as_deref().unwrap_or("-"),
            marker
        );
    }
    Ok(())
}

fn run_images(path: &str, json: bool) -> CliResult {
    let bytes = read(path)?;
    let kind = image::classify(&bytes);
    let images = find_images(&bytes)?;
    if images.is_empty() && matches!(kind, image::ImageKind::Unknown) {
        return Err(image::not_a_container(kind).into());
    }
    if json {
        let v: Vec<serde_json::Value> = images
            .iter()
            .map(|i| {
                serde_json::json!({
                    "container": i.container,
                    "section": i.section,
                    "offload_kind": i.offload_kind,
                    "triple": i.triple,
                    "arch": i.arch,
                    "kind": i.kind.name(),
                    "size": i.data.len(),
                    "offset": i.range.as_ref().map(|r| r.start),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:<20} {:<8} {:<28} {:<22} {:<18} {:>10}",
        "container", "kind", "triple", "arch", "image", "size"
    );
    for i in &images {
        println!(
            "{:<20} {:<8} {:<28} {:<22} {:<18} {:>10}",
            i.container,
            i.offload_kind,
            i.triple,
            i.arch.as_deref().unwrap_or("-"),
            i.kind.name(),
            i.data.len()
        );
    }
    Ok(())
}
