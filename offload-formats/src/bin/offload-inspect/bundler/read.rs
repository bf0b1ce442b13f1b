//! `unbundle` and `list`: plain bundles read in place, compressed ones decompressed as
//! they are read.

use super::{english_list, objcopy, BundlerOptions, Format};
use crate::files::{write_file, Output, Source, SourceKind};
use crate::{fail, io_message, read, CliResult, Failure};
use offload_formats::bundle::{self, text, Bundle, BundleEntryId};
use offload_formats::compressed::{self, CompressedBundle};
use offload_formats::string_map_order::string_map_order;
use std::io::Read;

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

pub fn list(path: &str, format: &Format, json: bool) -> CliResult {
    let mut source = Source::open(path)?;
    let prefix = source.prefix(MAGIC_PREFIX)?;
    let streamed =
        if compressed::is_compressed_bundle(&prefix) && !matches!(format, Format::Text(_)) {
            // Decompressed to the end, as the bundler does: the hash covers the whole payload.
            match open_compressed(&mut source, format)? {
                Some((plain, table)) => {
                    plain
                        .finish()
                        .map_err(|e| Failure(format!("'{path}': {e}")))?;
                    Some(table)
                }
                None => None,
            }
        } else if reads_in_place(format, &prefix) {
            Some(read_table(&mut source, format, &prefix)?)
        } else {
            None
        };
    let ids: Vec<String> = if let Some(table) = streamed {
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

pub fn unbundle_files(
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
    let written = match unbundle_compressed(o, format, wanted, &mut source, &prefix)? {
        Some(written) => written,
        None => unbundle_whole(o, format, wanted, &mut source, &prefix)?,
    };
    if json {
        println!("{}", serde_json::json!({ "unbundled": written }));
    }
    Ok(())
}

/// The bundler's matching: entries in file order, each to the first wanted target not
/// yet satisfied that it is compatible with. Returns (entry index, target, output) for
/// each match, and the (target, output) pairs left without one.
fn assign<'w>(
    ids: &[&str],
    wanted: &'w [BundleEntryId],
    outputs: &'w [String],
    hip_openmp_compatible: bool,
) -> (Vec<Assigned<'w>>, Vec<Unmatched<'w>>) {
    let mut pending: Vec<Unmatched> = wanted
        .iter()
        .zip(outputs.iter().map(String::as_str))
        .collect();
    let mut assigned = Vec::new();
    for (entry, id_text) in ids.iter().enumerate() {
        if pending.is_empty() {
            break;
        }
        let Ok(code_object) = BundleEntryId::parse(id_text) else {
            continue;
        };
        if let Some(pos) = pending
            .iter()
            .position(|(w, _)| code_object.is_code_object_compatible(w, hip_openmp_compatible))
        {
            let (target, output) = pending.remove(pos);
            assigned.push(Assigned {
                entry,
                is_host: code_object.is_host(),
                target,
                output,
            });
        }
    }
    (assigned, pending)
}

/// An entry matched to a wanted target and its output.
struct Assigned<'w> {
    entry: usize,
    is_host: bool,
    target: &'w BundleEntryId,
    output: &'w str,
}

/// A wanted target without an entry, and its output.
type Unmatched<'w> = (&'w BundleEntryId, &'w str);

/// What unbundling wrote, for `--json`.
fn written_entry(a: &Assigned, id_text: &str, size: u64) -> serde_json::Value {
    serde_json::json!({"target": a.target.to_bundler_string(), "bundle": id_text, "output": a.output, "size": size})
}

/// The bundler's rules for wanted targets without an entry, once the matched ones are
/// written: an error unless `-allow-missing-bundles`, else empty outputs, and when no
/// target matched at all, the host output gets the whole input (`write_whole_input`).
fn finish_unmatched(
    o: &BundlerOptions,
    wanted: &[BundleEntryId],
    pending: &[Unmatched],
    found_host: bool,
    write_whole_input: impl FnOnce(&str) -> CliResult,
) -> CliResult {
    if !pending.is_empty() && !o.allow_missing_bundles {
        let mut missing: Vec<String> = pending.iter().map(|(w, _)| w.to_bundler_string()).collect();
        missing.sort();
        missing.dedup();
        return fail(format!("Can't find bundles for{}", english_list(&missing)));
    }
    let nothing_found = pending.len() == wanted.len();
    let mut write_whole_input = Some(write_whole_input);
    for (w, path) in pending {
        // No bundle at all: the input is taken to be the host code object.
        match write_whole_input.take_if(|_| nothing_found && w.is_host()) {
            Some(write) => write(path)?,
            None => write_file(path, &[])?,
        }
    }
    let host_wanted = wanted.iter().any(BundleEntryId::is_host);
    if !nothing_found && !found_host && host_wanted && !o.allow_missing_bundles {
        return fail("Can't find bundle for the host target");
    }
    Ok(())
}

/// A compressed binary bundle unbundled as it decompresses: its entry table read from
/// the stream's start, the matched code objects written in offset order to temporary
/// outputs, which are renamed into place only once the whole payload's size and MD5
/// match the header. Memory: zstd's window (at most 128 MiB) and a fixed buffer.
/// `None` where this does not apply and the whole input is read instead: not a
/// compressed bundle, a text type (its markers are found by seeking), not a regular
/// file, a payload that is no plain bundle, code objects out of order or overlapping,
/// or no target matched (the host output then gets the whole plain bundle).
fn unbundle_compressed(
    o: &BundlerOptions,
    format: &Format,
    wanted: &[BundleEntryId],
    source: &mut Source,
    prefix: &[u8],
) -> CliResult<Option<Vec<serde_json::Value>>> {
    if !compressed::is_compressed_bundle(prefix) || matches!(format, Format::Text(_)) {
        return Ok(None);
    }
    let path = source.path.clone();
    let Some((mut plain, table)) = open_compressed(source, format)? else {
        return Ok(None);
    };
    let ids: Vec<&str> = table.iter().map(|e| e.id.as_str()).collect();
    let (mut assigned, pending) = assign(&ids, wanted, &o.outputs, o.hip_openmp_compatible);
    assigned.sort_by_key(|a| table[a.entry].offset);
    let mut at = plain.position();
    for a in &assigned {
        let e = &table[a.entry];
        if e.offset < at {
            return Ok(None);
        }
        at = e.offset + e.size;
    }
    if assigned.is_empty() {
        return Ok(None);
    }
    let mut outputs: Vec<Output> = assigned
        .iter()
        .map(|a| Output::create(a.output))
        .collect::<CliResult<_>>()?;
    let mut buffer = vec![0u8; COPY_BUFFER];
    for (a, out) in assigned.iter().zip(outputs.iter_mut()) {
        let e = &table[a.entry];
        let skip = e.offset - plain.position();
        let skipped = std::io::copy(&mut (&mut plain).take(skip), &mut std::io::sink());
        if !matches!(skipped, Ok(n) if n == skip) {
            return Err(stream_failure(plain, &path, skipped.err()));
        }
        let mut left = e.size;
        while left > 0 {
            let want = left.min(buffer.len() as u64) as usize;
            match plain.read(&mut buffer[..want]) {
                Ok(0) => return Err(stream_failure(plain, &path, None)),
                Ok(n) => {
                    out.write_all(&buffer[..n])?;
                    left -= n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(stream_failure(plain, &path, Some(e))),
            }
        }
    }
    plain
        .finish()
        .map_err(|e| Failure(format!("'{path}': {e}")))?;
    for out in outputs {
        out.commit()?;
    }
    let found_host = assigned.iter().any(|a| a.is_host);
    let written = assigned
        .iter()
        .map(|a| written_entry(a, ids[a.entry], table[a.entry].size))
        .collect();
    // Some target matched, so no output gets the whole input.
    finish_unmatched(o, wanted, &pending, found_host, |_| Ok(()))?;
    Ok(Some(written))
}

/// The plain bundle inside a compressed one, decompressing, with its entry table read;
/// `None` when the input is not a regular file or the payload is no plain binary bundle.
fn open_compressed<'s>(
    source: &'s mut Source,
    format: &Format,
) -> CliResult<Option<(compressed::DecompressedReader<'s>, Vec<bundle::EntryRange>)>> {
    let head = source.prefix(compressed::MAX_HEADER_LEN)?;
    let header = compressed::Header::parse(&head, source.len)?;
    source.seek(header.payload_offset)?;
    let path = source.path.clone();
    let SourceKind::File(file) = &source.kind else {
        return Ok(None);
    };
    let mut plain = compressed::DecompressedReader::new(header, file)?;
    let mut magic = Vec::with_capacity(MAGIC_PREFIX);
    if let Err(e) = (&mut plain)
        .take(MAGIC_PREFIX as u64)
        .read_to_end(&mut magic)
    {
        return Err(stream_failure(plain, &path, Some(e)));
    }
    if !bundle::is_bundle(&magic) || format.is_object_bundle(&magic) {
        return Ok(None);
    }
    let table = bundle::read_entry_table(
        &mut magic.as_slice().chain(&mut plain),
        header.uncompressed_size,
    );
    match table {
        Ok(Ok(table)) => Ok(Some((plain, table))),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(stream_failure(plain, &path, Some(e))),
    }
}

/// The error for a decompressed stream that failed or ended early: the header check's
/// (size, hash) when the rest of the payload shows one, else the read error.
fn stream_failure(
    plain: compressed::DecompressedReader,
    path: &str,
    error: Option<std::io::Error>,
) -> Failure {
    match (plain.finish(), error) {
        (Err(e), _) => Failure(format!("'{path}': {e}")),
        (Ok(()), Some(e)) => Failure(format!("'{path}': {}", io_message(&e))),
        (Ok(()), None) => Failure(format!("'{path}': the decompressed bundle ended early")),
    }
}

/// The buffer code objects are decompressed through.
const COPY_BUFFER: usize = 1 << 20;

/// Unbundle from the input read in place (a plain bundle, or no bundle) or from the
/// whole input in memory: object-file bundles, and the compressed bundles
/// [`unbundle_compressed`] leaves (text types, odd layouts, pipes).
fn unbundle_whole(
    o: &BundlerOptions,
    format: &Format,
    wanted: &[BundleEntryId],
    source: &mut Source,
    prefix: &[u8],
) -> CliResult<Vec<serde_json::Value>> {
    // A plain binary or text bundle, or a file that is none (the host code object), is
    // read in place; compressed and object-file bundles are read into memory.
    let in_place = reads_in_place(format, prefix);
    // Filled only when the input is read into memory.
    let mut input = ParsedInput { bytes: Vec::new() };
    let table;
    let entries: Vec<(&str, Code)> = if in_place {
        table = read_table(source, format, prefix)?;
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
    let ids: Vec<&str> = entries.iter().map(|(id, _)| *id).collect();
    let (assigned, pending) = assign(&ids, wanted, &o.outputs, o.hip_openmp_compatible);
    let mut written = Vec::new();
    // Ranges of the input to copy (offset, size, output): done together, after the loop.
    let mut copies = Vec::new();
    for a in &assigned {
        let size = match &entries[a.entry].1 {
            // The host code of an object bundle is the object minus the bundle sections.
            Code::Bytes(data) if object_bundle && objcopy::is_host_placeholder(data) => {
                objcopy::host_object(&o.inputs[0], a.output)?;
                std::fs::metadata(a.output).map_or(0, |m| m.len())
            }
            Code::Bytes(data) => {
                write_file(a.output, data)?;
                data.len() as u64
            }
            Code::Range { offset, size } => {
                copies.push((*offset, *size, a.output));
                *size
            }
        };
        written.push(written_entry(a, ids[a.entry], size));
    }
    copy_ranges(source, &copies)?;
    let found_host = assigned.iter().any(|a| a.is_host);
    finish_unmatched(o, wanted, &pending, found_host, |path| {
        if in_place {
            let len = source.len;
            copy_range(source, 0, len, path)
        } else {
            write_file(path, &input.bytes)
        }
    })?;
    Ok(written)
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
/// Copy ranges of the input (offset, size, output) to their outputs. Each copy is the
/// kernel's (`copy_file_range`), bounded by copying pages; with more than one output and
/// CPU and enough bytes to matter, they run side by side, one reader of the input per
/// thread (each its own open file, so each its own position).
fn copy_ranges(source: &mut Source, copies: &[(u64, u64, &str)]) -> CliResult {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let bytes: u64 = copies.iter().map(|c| c.1).sum();
    let workers = cpus.min(copies.len());
    if workers < 2 || bytes < PARALLEL_COPY_BYTES || !source.can_reopen() {
        for &(offset, size, path) in copies {
            copy_range(source, offset, size, path)?;
        }
        return Ok(());
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let source = &*source;
    std::thread::scope(|scope| {
        let worker = || -> CliResult {
            let mut input = source.reopen()?;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(offset, size, path)) = copies.get(i) else {
                    return Ok(());
                };
                copy_range(&mut input, offset, size, path)?;
            }
        };
        let threads: Vec<_> = (0..workers).map(|_| scope.spawn(worker)).collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| fail("a copying thread panicked"))
            })
            .collect::<CliResult<Vec<()>>>()
    })?;
    Ok(())
}

/// Below this many bytes to copy, threads cost more than they save.
const PARALLEL_COPY_BYTES: u64 = 64 << 20;

fn copy_range(source: &mut Source, offset: u64, size: u64, path: &str) -> CliResult {
    source.seek(offset)?;
    let mut out = Output::create(path)?;
    out.copy_from(source, size)?;
    out.commit()
}
