//! `bundle`: a plain bundle written as its inputs stream in; compressed as it goes with
//! `-compress`.

use super::{compression_version, conflicting_targets, zstd_level, BundlerOptions, Format};
use crate::files::{write_file, Output, Source, SourceKind};
use crate::read;
use crate::{fail, CliResult};
use offload_formats::bundle::{self, text, BundleEntryId};
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
