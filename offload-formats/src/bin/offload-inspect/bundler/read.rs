//! `unbundle` and `list`: plain bundles read in place, compressed ones decompressed as
//! they are read.

use super::{english_list, BundlerOptions, Format};
use crate::files::{write_file, Output, Source, SourceKind};
use crate::{fail, io_message, read, CliResult, Failure};
use offload_formats::bundle::{self, text, Bundle, BundleEntryId};
use offload_formats::compressed::{self, CompressedBundle};
use offload_formats::string_map_order::string_map_order;

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
