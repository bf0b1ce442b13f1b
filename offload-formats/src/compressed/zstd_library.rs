//! The zstd library that compresses bundles: the machine's `libzstd.so.1` when it loads,
//! else the copy built into this crate.
//!
//! Why the machine's: a zstd frame is a function of the library's version, not only of
//! the parameters. clang-offload-bundler links the machine's libzstd, so only the same
//! library gives its bytes (Debian 12's 1.5.4 and the built-in 1.5.7 differ from 128 KiB
//! of input on). Decompression gives the same bytes with any version, so reading always
//! uses the built-in copy.
//!
//! Both libraries are driven through one table of the stable C functions
//! ([`ZstdApi`]), so the streaming loop ([`FrameWriter`]) exists once.
//!
//! Streamed and one-shot frames are the same bytes only up to the window (128 MiB with
//! long-distance matching) plus a block: beyond it the streaming compressor's history
//! is a ring buffer, and matches across its wrap go through zstd's "external
//! dictionary" search, which can choose other matches than the one-shot compressor
//! (clang-offload-bundler's `ZSTD_compress2`), which sees the whole input contiguous.
//! [`compress_one_shot`] is that call, for byte identity at any size, at the cost of
//! holding the input.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use zstd_sys::{ZSTD_CCtx, ZSTD_EndDirective, ZSTD_inBuffer, ZSTD_outBuffer};

/// The zstd functions compression needs (stable API since 1.4.0), from one library.
struct ZstdApi {
    create_cctx: unsafe extern "C" fn() -> *mut ZSTD_CCtx,
    free_cctx: unsafe extern "C" fn(*mut ZSTD_CCtx) -> usize,
    set_parameter: unsafe extern "C" fn(*mut ZSTD_CCtx, c_int, c_int) -> usize,
    set_pledged_src_size: unsafe extern "C" fn(*mut ZSTD_CCtx, u64) -> usize,
    compress_stream2: unsafe extern "C" fn(
        *mut ZSTD_CCtx,
        *mut ZSTD_outBuffer,
        *mut ZSTD_inBuffer,
        c_int,
    ) -> usize,
    compress2:
        unsafe extern "C" fn(*mut ZSTD_CCtx, *mut c_void, usize, *const c_void, usize) -> usize,
    compress_bound: unsafe extern "C" fn(usize) -> usize,
    is_error: unsafe extern "C" fn(usize) -> c_uint,
    error_name: unsafe extern "C" fn(usize) -> *const c_char,
    /// Keeps the system library mapped while the pointers above are used.
    _library: Option<libloading::Library>,
}

/// `ZSTD_cParameter` values (zstd.h; fixed by the stable API).
const ZSTD_C_COMPRESSION_LEVEL: c_int = 100;
const ZSTD_C_ENABLE_LONG_DISTANCE_MATCHING: c_int = 160;

/// The library [`FrameWriter`] uses: loaded once per process.
fn api() -> &'static ZstdApi {
    static API: std::sync::OnceLock<ZstdApi> = std::sync::OnceLock::new();
    API.get_or_init(|| system().unwrap_or_else(builtin))
}

/// The zstd copy built into this crate (zstd-sys).
fn builtin() -> ZstdApi {
    // The casts only erase the bindings' enum parameter types: `ZSTD_cParameter` and
    // `ZSTD_EndDirective` are C enums, passed as `int`.
    ZstdApi {
        create_cctx: zstd_sys::ZSTD_createCCtx,
        free_cctx: zstd_sys::ZSTD_freeCCtx,
        // SAFETY (both transmutes): a fieldless `#[repr(u32)]` C enum and `c_int` have
        // the same size and passing convention; every value we pass is one of the
        // enum's declared values.
        set_parameter: unsafe {
            std::mem::transmute::<
                unsafe extern "C" fn(*mut ZSTD_CCtx, zstd_sys::ZSTD_cParameter, c_int) -> usize,
                unsafe extern "C" fn(*mut ZSTD_CCtx, c_int, c_int) -> usize,
            >(zstd_sys::ZSTD_CCtx_setParameter)
        },
        set_pledged_src_size: zstd_sys::ZSTD_CCtx_setPledgedSrcSize,
        compress_stream2: unsafe {
            std::mem::transmute::<
                unsafe extern "C" fn(
                    *mut ZSTD_CCtx,
                    *mut ZSTD_outBuffer,
                    *mut ZSTD_inBuffer,
                    ZSTD_EndDirective,
                ) -> usize,
                unsafe extern "C" fn(
                    *mut ZSTD_CCtx,
                    *mut ZSTD_outBuffer,
                    *mut ZSTD_inBuffer,
                    c_int,
                ) -> usize,
            >(zstd_sys::ZSTD_compressStream2)
        },
        compress2: zstd_sys::ZSTD_compress2,
        compress_bound: zstd_sys::ZSTD_compressBound,
        is_error: zstd_sys::ZSTD_isError,
        error_name: zstd_sys::ZSTD_getErrorName,
        _library: None,
    }
}

/// The machine's `libzstd.so.1`, if it loads and has every function (1.4.0 or later).
/// `OFFLOAD_INSPECT_BUILTIN_ZSTD=1` skips it (tests of the built-in path).
fn system() -> Option<ZstdApi> {
    if std::env::var_os("OFFLOAD_INSPECT_BUILTIN_ZSTD").is_some_and(|v| v == "1") {
        return None;
    }
    // SAFETY: loading libzstd runs no initialisers beyond the C runtime's; it is the
    // library clang-offload-bundler itself loads.
    let library = unsafe { libloading::Library::new("libzstd.so.1") }.ok()?;
    // SAFETY: each symbol is looked up with the C prototype zstd.h declares for it
    // (enum parameters as `int`), and the library stays loaded in `_library`.
    unsafe {
        Some(ZstdApi {
            create_cctx: *library.get(b"ZSTD_createCCtx\0").ok()?,
            free_cctx: *library.get(b"ZSTD_freeCCtx\0").ok()?,
            set_parameter: *library.get(b"ZSTD_CCtx_setParameter\0").ok()?,
            set_pledged_src_size: *library.get(b"ZSTD_CCtx_setPledgedSrcSize\0").ok()?,
            compress_stream2: *library.get(b"ZSTD_compressStream2\0").ok()?,
            compress2: *library.get(b"ZSTD_compress2\0").ok()?,
            compress_bound: *library.get(b"ZSTD_compressBound\0").ok()?,
            is_error: *library.get(b"ZSTD_isError\0").ok()?,
            error_name: *library.get(b"ZSTD_getErrorName\0").ok()?,
            _library: Some(library),
        })
    }
}

/// Up to this many bytes of input, [`FrameWriter`]'s frame is [`compress_one_shot`]'s
/// (the window, 2^27, plus one 128 KiB block: the streaming history has not wrapped).
pub const STREAMED_EQUALS_ONE_SHOT: u64 = (1 << 27) + (128 << 10);

/// `data` compressed in one call, as LLVM's `compression::zstd::compress` does for the
/// bundler (the same parameters as [`FrameWriter`]).
pub fn compress_one_shot(data: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    let api = api();
    let context = Context::new(level, data.len() as u64)?;
    // SAFETY: ZSTD_compressBound takes any size.
    let bound = check(unsafe { (api.compress_bound)(data.len()) })?;
    let mut out = vec![0u8; bound];
    // SAFETY: the context is live; `out` has `bound` writable bytes, the most zstd can
    // write for `data.len()` bytes of input, and `data` is readable for its length.
    let written = check(unsafe {
        (api.compress2)(
            context.cctx,
            out.as_mut_ptr().cast::<c_void>(),
            out.len(),
            data.as_ptr().cast::<c_void>(),
            data.len(),
        )
    })?;
    out.truncate(written);
    Ok(out)
}

/// A compression context with the bundler's parameters, freed on drop.
struct Context {
    cctx: *mut ZSTD_CCtx,
}

impl Context {
    fn new(level: i32, content_size: u64) -> std::io::Result<Self> {
        let api = api();
        // SAFETY: ZSTD_createCCtx takes nothing; null means out of memory.
        let cctx = unsafe { (api.create_cctx)() };
        if cctx.is_null() {
            return Err(std::io::Error::other("ZSTD_createCCtx failed"));
        }
        let context = Context { cctx };
        // SAFETY: `cctx` is the live context created above (freed only by Drop).
        unsafe {
            check((api.set_parameter)(cctx, ZSTD_C_COMPRESSION_LEVEL, level))?;
            check((api.set_parameter)(
                cctx,
                ZSTD_C_ENABLE_LONG_DISTANCE_MATCHING,
                1,
            ))?;
            check((api.set_pledged_src_size)(cctx, content_size))?;
        }
        Ok(context)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context created in `new`, freed once, here.
        unsafe { (api().free_cctx)(self.cctx) };
    }
}

/// One zstd frame written to `W` as data arrives, with the parameters LLVM's
/// `compression::zstd::compress` uses for the bundler: the level, long-distance
/// matching on, the content size in the frame header, no checksum.
pub struct FrameWriter<W: std::io::Write> {
    context: Context,
    /// `None` once [`FrameWriter::finish`] has given it back.
    out: Option<W>,
    buffer: Vec<u8>,
    written: u64,
}

/// Output buffer size: what zstd calls a block plus its header, so one call can always
/// make progress (ZSTD_CStreamOutSize's value).
const OUT_BUFFER: usize = (128 << 10) + 512;

impl<W: std::io::Write> FrameWriter<W> {
    /// A frame of exactly `content_size` bytes (written into its header, checked at
    /// the end by zstd).
    pub fn new(out: W, level: i32, content_size: u64) -> std::io::Result<Self> {
        Ok(FrameWriter {
            context: Context::new(level, content_size)?,
            out: Some(out),
            buffer: vec![0; OUT_BUFFER],
            written: 0,
        })
    }

    /// Feed `data`, or (with `end`) finish the frame; writes whatever zstd produced.
    fn stream(&mut self, data: &[u8], end: bool) -> std::io::Result<()> {
        let api = api();
        let directive = if end {
            ZSTD_EndDirective::ZSTD_e_end
        } else {
            ZSTD_EndDirective::ZSTD_e_continue
        } as c_int;
        let mut input = ZSTD_inBuffer {
            src: data.as_ptr().cast::<c_void>(),
            size: data.len(),
            pos: 0,
        };
        loop {
            let mut output = ZSTD_outBuffer {
                dst: self.buffer.as_mut_ptr().cast::<c_void>(),
                size: self.buffer.len(),
                pos: 0,
            };
            // SAFETY: `cctx` is live; `input` points at `data` and `output` at our
            // buffer, both valid for their sizes for the whole call.
            let left = check(unsafe {
                (api.compress_stream2)(self.context.cctx, &mut output, &mut input, directive)
            })?;
            let out = self.out.as_mut().expect("streaming before finish");
            out.write_all(&self.buffer[..output.pos])?;
            self.written += output.pos as u64;
            let consumed = input.pos == input.size;
            if (end && left == 0) || (!end && consumed) {
                return Ok(());
            }
        }
    }

    /// End the frame (zstd checks the pledged size) and give back the writer with the
    /// frame's length.
    pub fn finish(mut self) -> std::io::Result<(W, u64)> {
        self.stream(&[], true)?;
        let out = self.out.take().expect("the writer is taken only here");
        Ok((out, self.written))
    }
}

impl<W: std::io::Write> std::io::Write for FrameWriter<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.stream(data, false)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.as_mut().map_or(Ok(()), std::io::Write::flush)
    }
}

/// A zstd return code: the value, or its error as an `io::Error`.
fn check(code: usize) -> std::io::Result<usize> {
    let api = api();
    // SAFETY: ZSTD_isError and ZSTD_getErrorName take any code; the name is static.
    unsafe {
        if (api.is_error)(code) != 0 {
            let name = CStr::from_ptr((api.error_name)(code)).to_string_lossy();
            return Err(std::io::Error::other(format!("zstd: {name}")));
        }
    }
    Ok(code)
}
