//! Compressed bundles written and read as streams, in memory that does not grow with
//! the bundle: what is held is zstd's window (at most 128 MiB: long-distance matching
//! sets window log 27) and fixed buffers.
//!
//! The header comes first but holds what is known only at the end (the compressed size
//! and the MD5 of the whole plain bundle), so the writer leaves room for it and writes it
//! last, and the reader's [`DecompressedReader::finish`] checks the size and hash only
//! when the whole payload has been read.

use super::{header, header_len, zstd_library::FrameWriter, Header, Method};
use crate::error::{Error, Result};
use std::io::{Read, Seek, SeekFrom, Write};

const CONTAINER: &str = "compressed offload bundle";

/// A zstd-compressed bundle written as its plain bundle arrives through [`Write`]: a
/// placeholder header, the frame, then the header over the placeholder
/// ([`CompressedWriter::finish`]). The output must seek, and the plain bundle's size be
/// known up front (it is in the frame header).
pub struct CompressedWriter<W: Write + Seek> {
    frame: FrameWriter<W>,
    md5: Md5Thread,
    version: u16,
    start: u64,
    uncompressed: u64,
    expected: u64,
}

impl<W: Write + Seek> CompressedWriter<W> {
    /// Start a version 2 or 3 bundle of `uncompressed_size` plain bytes at `out`'s
    /// position, compressed at zstd `level`.
    pub fn new(mut out: W, version: u16, level: i32, uncompressed_size: u64) -> Result<Self> {
        let len = header_len(version)?;
        // Fail now, not after compressing, where version 2's fields cannot hold the size.
        header(version, Method::Zstd, len, uncompressed_size, 0)?;
        let io = |e: std::io::Error| io_error("writing", e);
        let start = out.stream_position().map_err(io)?;
        out.write_all(&vec![0; len as usize]).map_err(io)?;
        Ok(CompressedWriter {
            frame: FrameWriter::new(out, level, uncompressed_size).map_err(io)?,
            md5: Md5Thread::start(),
            version,
            start,
            uncompressed: 0,
            expected: uncompressed_size,
        })
    }

    /// End the frame, write the header, and give back the output (positioned at the
    /// end) with the compressed bundle's total size.
    pub fn finish(self) -> Result<(W, u64)> {
        if self.uncompressed != self.expected {
            return Err(Error::Decompress {
                container: CONTAINER,
                offset: 0,
                reason: format!(
                    "{} plain bytes written, {} announced",
                    self.uncompressed, self.expected
                ),
            });
        }
        let io = |e: std::io::Error| io_error("writing", e);
        let (mut out, compressed) = self.frame.finish().map_err(io)?;
        let total = header_len(self.version)? + compressed;
        let digest = self.md5.finish().ok_or_else(hash_lost)?;
        let hash = super::low_64(&digest);
        let bytes = header(self.version, Method::Zstd, total, self.uncompressed, hash)?;
        out.seek(SeekFrom::Start(self.start)).map_err(io)?;
        out.write_all(&bytes).map_err(io)?;
        out.seek(SeekFrom::Start(self.start + total)).map_err(io)?;
        Ok((out, total))
    }
}

impl<W: Write + Seek> Write for CompressedWriter<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.frame.write_all(data)?;
        self.md5.consume(data);
        self.uncompressed += data.len() as u64;
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.frame.flush()
    }
}

/// The plain bundle of a compressed bundle, decompressed as it is read. Read it to the
/// end, then [`DecompressedReader::finish`] checks its size and hash against the
/// header: until then nothing read may be trusted.
pub struct DecompressedReader<'r> {
    inner: Box<dyn Read + 'r>,
    header: Header,
    md5: Md5Thread,
    read: u64,
}

impl<'r> DecompressedReader<'r> {
    /// `payload` reads the compressed bytes: from the header's `payload_offset` (its
    /// `payload_end` is where this stops reading).
    pub fn new(header: Header, payload: impl Read + 'r) -> Result<Self> {
        let payload = payload.take(header.payload_end - header.payload_offset);
        // One byte more than announced is let through, so `finish` sees an overlong
        // stream without decompressing it all.
        let limit = header.uncompressed_size + 1;
        let inner: Box<dyn Read + 'r> = match header.method {
            Method::Zstd => {
                let mut d = zstd::stream::read::Decoder::new(payload)
                    .map_err(|e| io_error("decompressing", e))?;
                // Any window a frame declares (bounded by its content size when it has
                // one), not only zstd's default limit of 2^27.
                d.window_log_max(31)
                    .map_err(|e| io_error("decompressing", e))?;
                Box::new(d.take(limit))
            }
            Method::Zlib => Box::new(flate2::read::ZlibDecoder::new(payload).take(limit)),
        };
        Ok(DecompressedReader {
            inner,
            header,
            md5: Md5Thread::start(),
            read: 0,
        })
    }

    /// Plain bytes read so far.
    pub fn position(&self) -> u64 {
        self.read
    }

    /// Read what is left, then check the size and hash against the header.
    pub fn finish(mut self) -> Result<()> {
        if let Err(e) = std::io::copy(&mut self, &mut std::io::sink()) {
            return Err(decompress_error(&self.header, e.to_string()));
        }
        let DecompressedReader {
            header, md5, read, ..
        } = self;
        let limit = header.uncompressed_size;
        if read != limit {
            let more = if read > limit { "more than " } else { "" };
            return Err(decompress_error(
                &header,
                format!(
                    "decompressed to {more}{} bytes, header says {limit}",
                    read.min(limit)
                ),
            ));
        }
        let digest = md5.finish().ok_or_else(hash_lost)?;
        if super::low_64(&digest) != header.hash {
            return Err(decompress_error(
                &header,
                "hash of the decompressed bundle does not match".into(),
            ));
        }
        Ok(())
    }
}

/// A payload that does not decompress to what `header` announces.
fn decompress_error(header: &Header, reason: String) -> Error {
    Error::Decompress {
        container: CONTAINER,
        offset: header.payload_offset,
        reason,
    }
}

impl Read for DecompressedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.md5.consume(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

/// MD5 computed on a thread of its own, so hashing (about 600 MB/s, and serial) overlaps
/// compressing, decompressing and writing: bytes go over in 1 MiB batches through a
/// queue of 4, and the batches come back to be refilled (memory: about 6 MiB).
struct Md5Thread {
    batch: Vec<u8>,
    to_hasher: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    returned: Option<std::sync::mpsc::Receiver<Vec<u8>>>,
    hasher: Option<std::thread::JoinHandle<[u8; 16]>>,
}

const MD5_BATCH: usize = 1 << 20;

impl Md5Thread {
    fn start() -> Self {
        let (to_hasher, batches) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
        let (give_back, returned) = std::sync::mpsc::channel();
        let hasher = std::thread::spawn(move || {
            let mut md5 = md5::Context::new();
            for batch in batches {
                md5.consume(&batch);
                // The other side may be gone (finished); the batch is then just dropped.
                let _ = give_back.send(batch);
            }
            md5.compute().0
        });
        Md5Thread {
            batch: Vec::with_capacity(MD5_BATCH),
            to_hasher: Some(to_hasher),
            returned: Some(returned),
            hasher: Some(hasher),
        }
    }

    fn consume(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = MD5_BATCH - self.batch.len();
            let (now, rest) = data.split_at(room.min(data.len()));
            self.batch.extend_from_slice(now);
            data = rest;
            if self.batch.len() == MD5_BATCH {
                self.send();
            }
        }
    }

    fn send(&mut self) {
        let fresh = self
            .returned
            .as_ref()
            .and_then(|r| r.try_recv().ok())
            .map(|mut b| {
                b.clear();
                b
            })
            .unwrap_or_else(|| Vec::with_capacity(MD5_BATCH));
        let full = std::mem::replace(&mut self.batch, fresh);
        if let Some(to_hasher) = &self.to_hasher {
            // Fails only if the hasher thread died, which `finish` then reports.
            let _ = to_hasher.send(full);
        }
    }

    /// The digest of everything consumed; `None` if the hashing thread was lost.
    fn finish(mut self) -> Option<[u8; 16]> {
        self.send();
        self.to_hasher = None;
        self.hasher.take()?.join().ok()
    }
}

fn hash_lost() -> Error {
    Error::Io {
        container: CONTAINER,
        doing: "hashing",
        reason: "the MD5 thread was lost".into(),
    }
}

fn io_error(doing: &'static str, e: std::io::Error) -> Error {
    Error::Io {
        container: CONTAINER,
        doing,
        reason: e.to_string(),
    }
}
