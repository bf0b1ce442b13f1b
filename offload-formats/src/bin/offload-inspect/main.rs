//! `offload-inspect`: look inside offload containers.
//!
//! * `offload-inspect bundle|unbundle|list <clang-offload-bundler options>`: a drop-in
//!   for clang-offload-bundler (same options, same bytes out, same listing, exit 1 on
//!   error) for the binary (`bc`, `gch`, `ast`), text (`ll`, `s`, `i`, `ii`, `cui`,
//!   `hipi`, `d`) and object (`o`) types, plain and `-compress`ed. Bundles stream:
//!   inputs are copied into the bundle, and code objects out of it, without being held
//!   in memory (`files`); compressed ones through zstd's window. Object bundles are made
//!   and stripped by llvm-objcopy, as the bundler makes them (`bundler::objcopy`).
//!   Every output appears whole or not at all. Archives (`-type=a`) are refused: see
//!   `bundler::format_of`.
//! * `offload-inspect entries FILE`: the host offload entries of an executable/object.
//! * `offload-inspect images FILE`: every embedded device image.
//!
//! `--json` (anywhere on the command line) switches every command to JSON output.

#![forbid(unsafe_code)]

mod bundler;
mod files;

use offload_formats::entries::{self, read_host_entries};
use offload_formats::image::{self, find_images};
use std::process::ExitCode;

/// A failure reported as `offload-inspect: error: <message>` with exit status 1.
pub struct Failure(pub String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

pub type CliResult<T = ()> = Result<T, Failure>;

pub fn fail<T>(msg: impl Into<String>) -> CliResult<T> {
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
            bundler::BundlerOptions::parse(rest).and_then(|o| bundler::run(&command, &o, json))
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

pub fn read(path: &str) -> CliResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| Failure(format!("'{path}': {}", io_message(&e))))
}

/// LLVM-style I/O error text ("No such file or directory").
pub fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
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
