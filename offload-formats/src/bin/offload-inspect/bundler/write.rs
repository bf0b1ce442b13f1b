//! `bundle`: a plain bundle written as its inputs stream in; compressed as it goes with
//! `-compress`.

use super::{compression_version, conflicting_targets, zstd_level, BundlerOptions, Format};
use crate::files::{write_file, Output, Source, SourceKind};
use crate::read;
use crate::{fail, io_message, CliResult, Failure};
use offload_formats::bundle::{self, text, BundleEntryId};
use offload_formats::compressed::zstd_library::STREAMED_EQUALS_ONE_SHOT;
use offload_formats::compressed::{self, Method};

pub fn bundle_files(
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
    // The bundler picks its handler by the first input: an object file makes an object
    // bundle (code objects as sections, through llvm-objcopy).
    if format.is_object_bundle(&sources[0].prefix(4)?) {
        drop(sources);
        let size = super::objcopy::bundle(&o.inputs, normalized, host, &o.outputs[0])?;
        return report(o, normalized, size, json);
    }
    let size = bundle_streamed(o, format, &sources, normalized)?;
    report(o, normalized, size, json)
}

/// `--json`: what was written.
fn report(o: &BundlerOptions, normalized: &[String], size: u64, json: bool) -> CliResult {
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

/// One piece of a plain bundle, in file order.
enum Piece {
    Bytes(Vec<u8>),
    Zeros(u64),
    /// All of `sources[i]`.
    Input(usize),
}

/// The plain bundle of `sources` as pieces, and its size: computed from the inputs'
/// sizes alone, so it is known before a byte is written (the compressed form needs it
/// up front).
fn plain_bundle(
    format: &Format,
    sources: &[Source],
    normalized: &[String],
    align: u64,
) -> (Vec<Piece>, u64) {
    let mut pieces = Vec::new();
    let mut size = 0u64;
    match format {
        Format::Binary | Format::Object => {
            let sizes: Vec<(&str, u64)> = normalized
                .iter()
                .map(String::as_str)
                .zip(sources.iter().map(|s| s.len))
                .collect();
            let (header, offsets) = bundle::header(&sizes, align);
            size += header.len() as u64;
            pieces.push(Piece::Bytes(header));
            for (i, offset) in offsets.into_iter().enumerate() {
                pieces.push(Piece::Zeros(offset - size));
                pieces.push(Piece::Input(i));
                size = offset + sources[i].len;
            }
        }
        Format::Text(comment) => {
            let (start, end) = text::markers(comment);
            for (i, id) in normalized.iter().enumerate() {
                let start_line = format!("{start}{id}\n").into_bytes();
                let end_line = format!("{end}{id}\n").into_bytes();
                size += (start_line.len() + end_line.len()) as u64 + sources[i].len;
                pieces.push(Piece::Bytes(start_line));
                pieces.push(Piece::Input(i));
                pieces.push(Piece::Bytes(end_line));
            }
        }
    }
    (pieces, size)
}

/// Write the bundle without holding its code objects. Plain: the pieces go to the
/// output, each input copied in by the kernel. `-compress`: the pieces stream through
/// zstd into the output and the header is written last, which needs a seekable output
/// (a regular file); to anything else (stdout, a pipe), and with
/// `OFFLOAD_INSPECT_EXACT_COMPRESSION=1` above [`STREAMED_EQUALS_ONE_SHOT`], the bundle
/// is built in memory and compressed in one call. Returns the bundle's size.
fn bundle_streamed(
    o: &BundlerOptions,
    format: &Format,
    sources: &[Source],
    normalized: &[String],
) -> CliResult<u64> {
    let (pieces, plain_size) = plain_bundle(format, sources, normalized, o.bundle_align);
    let mut out = Output::create(&o.outputs[0])?;
    let size = if !o.compress {
        for piece in &pieces {
            match piece {
                Piece::Bytes(b) => out.write_all(b)?,
                Piece::Zeros(n) => out.write_zeros(*n)?,
                Piece::Input(i) => out.copy_from(&sources[*i], sources[*i].len)?,
            }
        }
        plain_size
    } else if let Some(file) = out
        .seekable_file()
        .filter(|_| streams_compression(plain_size))
    {
        let compressing = compressed::CompressedWriter::new(
            file,
            compression_version(),
            zstd_level(o),
            plain_size,
        )?;
        write_compressed(compressing, &pieces, sources)
            .map_err(|e| Failure(format!("'{}': {e}", o.outputs[0])))?
    } else {
        drop(out);
        return bundle_in_memory(o, format, sources, normalized);
    };
    out.commit()?;
    Ok(size)
}

/// Stream `-compress` (bounded memory), unless the user asked for the bundler's exact
/// bytes at a size where a streamed frame can differ from its one-shot frame.
fn streams_compression(plain_size: u64) -> bool {
    let exact = std::env::var_os("OFFLOAD_INSPECT_EXACT_COMPRESSION").is_some_and(|v| v == "1");
    plain_size <= STREAMED_EQUALS_ONE_SHOT || !exact
}

/// Stream `pieces` through `compressing` (one fixed buffer for the inputs); returns the
/// compressed bundle's size.
fn write_compressed(
    mut compressing: compressed::CompressedWriter<&std::fs::File>,
    pieces: &[Piece],
    sources: &[Source],
) -> Result<u64, String> {
    use std::io::{Read, Write};
    let mut buffer = vec![0u8; COPY_BUFFER];
    for piece in pieces {
        match piece {
            Piece::Bytes(b) => compressing.write_all(b).map_err(|e| io_message(&e))?,
            Piece::Zeros(n) => {
                buffer.fill(0);
                let mut left = *n;
                while left > 0 {
                    let k = left.min(buffer.len() as u64) as usize;
                    compressing
                        .write_all(&buffer[..k])
                        .map_err(|e| io_message(&e))?;
                    left -= k as u64;
                }
            }
            Piece::Input(i) => {
                let source = &sources[*i];
                let copied = match &source.kind {
                    SourceKind::Bytes(b) => {
                        compressing.write_all(b).map_err(|e| io_message(&e))?;
                        b.len() as u64
                    }
                    SourceKind::File(f) => {
                        let mut from = f.take(source.len);
                        let mut copied = 0u64;
                        loop {
                            let n = from.read(&mut buffer).map_err(|e| {
                                format!("reading '{}': {}", source.path, io_message(&e))
                            })?;
                            if n == 0 {
                                break;
                            }
                            compressing
                                .write_all(&buffer[..n])
                                .map_err(|e| io_message(&e))?;
                            copied += n as u64;
                        }
                        copied
                    }
                };
                if copied != source.len {
                    return Err(format!(
                        "'{}' ended after {copied} of its {} bytes (did it change while being read?)",
                        source.path, source.len
                    ));
                }
            }
        }
    }
    let (_, total) = compressing.finish().map_err(|e| e.to_string())?;
    Ok(total)
}

/// The buffer inputs are read through on their way into zstd.
const COPY_BUFFER: usize = 1 << 20;

/// `-compress` in memory: the plain bundle built and compressed in one call, as the
/// bundler does (see [`bundle_streamed`] for when).
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
