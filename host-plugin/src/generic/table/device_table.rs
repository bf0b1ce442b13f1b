//! An image's indirect function table on its device, from install to release: the
//! sorted rows copied to a device buffer, the device runtime's globals pointed at them,
//! and the index beside them ([`crate::generic::table::fptr_index`]). One owner for the whole
//! life (install, replace, release); its buffers free themselves, so a step that fails
//! leaves nothing allocated.

use crate::backend::{AllocKind, DeviceAddr};
use crate::generic::device_buffer::{DeviceBuffer, DeviceMemory};
use crate::generic::error::{backend_err, PluginError};
use crate::generic::table::fptr::{self, FptrMapEntry};
use crate::generic::table::fptr_index::{self, DeviceIndex, FptrIndex, PlacedIndex, BUCKET_BYTES};
use device_rtl::symbols::INDEX_C;
use device_rtl::FptrHead;

/// Where one image's device runtimes find the table: ours, LLVM 18's, or both (at
/// least one of them).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableGlobals {
    /// Our device runtime's pair, where the image links it.
    pub(crate) fptr_map: Option<FptrMapGlobals>,
    /// The index header (`__omptarget_rs_fptr_index`), when the image's device runtime
    /// has one of the size this plugin writes (runtimes from before the index do not).
    pub(crate) index: Option<DeviceAddr>,
    /// The table's head (`__omptarget_rs_fptr_head`), likewise.
    pub(crate) head: Option<DeviceAddr>,
    /// The (IndirectCallTable, IndirectCallTableSize) fields of LLVM 18's device
    /// environment, where the image links LLVM 18's device runtime: its
    /// `__llvm_omp_indirect_call_lookup` searches the same sorted (host, device) rows.
    pub(crate) llvm_indirect_call_table: Option<DeviceAddr>,
}

/// Our device runtime's table globals.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FptrMapGlobals {
    /// `__omp_offloading_fptr_map_p`: the table's device address.
    pub(crate) map_p: DeviceAddr,
    /// `__omp_offloading_fptr_map_size`: its row count.
    pub(crate) map_size: DeviceAddr,
}

/// What [`crate::Device::fptr_index`] reports about an image's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexInfo {
    /// Device address of the image's `__omptarget_rs_fptr_index`.
    pub global: DeviceAddr,
    /// What the plugin wrote into it: the empty header when there is no index.
    pub header: FptrIndex,
}

/// One image's installed table.
pub(crate) struct DeviceTable {
    globals: TableGlobals,
    rows: Vec<FptrMapEntry>,
    /// The device copy of the rows (None when there are none).
    table: Option<DeviceBuffer>,
    index: Option<DeviceIndex>,
    /// What the head global holds.
    head: FptrHead,
}

impl DeviceTable {
    /// Copy `rows` (sorted, checked) to the device, point the image's globals at them and
    /// install their index. Returns the table and a line for the log about the index.
    pub(crate) fn install(
        memory: &DeviceMemory,
        globals: TableGlobals,
        rows: Vec<FptrMapEntry>,
    ) -> Result<(Self, String), PluginError> {
        let table = upload_rows(memory, &rows)?;
        point_globals(memory, &globals, table.as_ref(), rows.len())?;
        let mut installed = DeviceTable {
            globals,
            rows,
            table,
            index: None,
            head: FptrHead::NONE,
        };
        let note = installed.install_index(memory)?;
        let head = installed.install_head(memory)?;
        Ok((installed, format!("{note}; {head}")))
    }

    /// Replace the rows (`__tgt_rtl_set_function_ptr_map`), index and head included. The
    /// old head and index are turned off first, so that no step can leave the device
    /// with either of another table.
    pub(crate) fn replace(
        &mut self,
        memory: &DeviceMemory,
        rows: Vec<FptrMapEntry>,
    ) -> Result<String, PluginError> {
        let device = memory.device() as i32;
        if let Some(global) = self.globals.head {
            write_head(memory, global, &FptrHead::NONE)?;
            self.head = FptrHead::NONE;
        }
        if let Some(global) = self.globals.index {
            write_index_header(memory, global, &FptrIndex::NONE)?;
            if let Some(old) = self.index.take() {
                old.buckets
                    .free()
                    .map_err(backend_err(device, "freeing the previous index"))?;
            }
        }
        let table = upload_rows(memory, &rows)?;
        point_globals(memory, &self.globals, table.as_ref(), rows.len())?;
        let old = std::mem::replace(&mut self.table, table);
        self.rows = rows;
        if let Some(old) = old {
            old.free()
                .map_err(backend_err(device, "freeing the previous table"))?;
        }
        let note = self.install_index(memory)?;
        let head = self.install_head(memory)?;
        Ok(format!("{note}; {head}"))
    }

    /// Free the table and its index (the image is being unloaded), saying whether the
    /// driver took both back.
    pub(crate) fn release(self) -> Result<(), crate::BackendError> {
        let index = self.index.map(|i| i.buckets.free());
        let table = self.table.map(DeviceBuffer::free);
        index.unwrap_or(Ok(())).and(table.unwrap_or(Ok(())))
    }

    pub(crate) fn rows(&self) -> &[FptrMapEntry] {
        &self.rows
    }

    /// The table's device address (0 when empty).
    pub(crate) fn addr(&self) -> DeviceAddr {
        self.table.as_ref().map_or(0, DeviceBuffer::addr)
    }

    /// The head global and what was written into it; None without a head global.
    pub(crate) fn head_info(&self) -> Option<(DeviceAddr, FptrHead)> {
        Some((self.globals.head?, self.head))
    }

    /// The index global and what was written into it; None without an index global.
    pub(crate) fn index_info(&self) -> Option<IndexInfo> {
        Some(IndexInfo {
            global: self.globals.index?,
            header: self.index.as_ref().map_or(FptrIndex::NONE, |i| i.header),
        })
    }

    /// The head the device reads first ([`device_rtl::head`]): the rows themselves for a
    /// small table, else its key range; none where the index is turned off
    /// (`OMPTARGET_RS_FPTR_INDEX=0`: the device searches the table). Returns a line for
    /// the log.
    fn install_head(&mut self, memory: &DeviceMemory) -> Result<String, PluginError> {
        let Some(global) = self.globals.head else {
            return Ok(format!("no head: no {}", device_rtl::symbols::HEAD));
        };
        let head = if fptr_index::enabled() {
            FptrHead::of(&self.rows)
        } else {
            FptrHead::NONE
        };
        write_head(memory, global, &head)?;
        self.head = head;
        Ok(match head.rows_here {
            _ if head == FptrHead::NONE => "no head".into(),
            0 => format!("head: keys {:#x}..={:#x}", head.first_key, head.last_key()),
            rows => format!("head: the {rows} rows"),
        })
    }

    /// Build the rows' index, copy its buckets to the device and write its header into
    /// the image's index global; without an index (turned off, the builder gave up, no
    /// device memory for it) the global gets the empty header, so the device searches
    /// the table. Returns a line for the log; an error only when the header cannot be
    /// written (the buckets are then freed with their buffer).
    fn install_index(&mut self, memory: &DeviceMemory) -> Result<String, PluginError> {
        let Some(global) = self.globals.index else {
            return Ok(format!("no index: no {}", INDEX_C.to_string_lossy()));
        };
        let placed = if !fptr_index::enabled() {
            Err("turned off by OMPTARGET_RS_FPTR_INDEX=0".to_string())
        } else if memory.vendor().host_memory().is_some() {
            crate::generic::table::host_index::build(memory, &self.rows)
        } else {
            build_and_copy_index(memory, &self.rows)
        };
        let (index, note) = match placed {
            Ok(PlacedIndex { index, attempts }) => {
                let note = format!(
                    "index: {} buckets of {} pairs ({} bytes) at {:#x}, seed pair {attempts}",
                    index.header.bucket_count,
                    fptr_index::SLOTS,
                    index.header.bucket_count * BUCKET_BYTES as u64,
                    index.header.buckets,
                );
                (Some(index), note)
            }
            Err(reason) => (
                None,
                format!("no index ({reason}): lookups search the table"),
            ),
        };
        let header = index.as_ref().map_or(FptrIndex::NONE, |i| i.header);
        write_index_header(memory, global, &header)?;
        self.index = index;
        Ok(note)
    }
}

/// The rows copied to a fresh device buffer (None when there are none).
fn upload_rows(
    memory: &DeviceMemory,
    rows: &[FptrMapEntry],
) -> Result<Option<DeviceBuffer>, PluginError> {
    if rows.is_empty() {
        return Ok(None);
    }
    let device = memory.device() as i32;
    let bytes = fptr::as_bytes(rows);
    let buffer = memory
        .alloc(bytes.len(), AllocKind::Device)
        .map_err(backend_err(device, "allocating the indirect table"))?;
    buffer
        .write_at(0, bytes)
        .map_err(backend_err(device, "copying the indirect table"))?;
    Ok(Some(buffer))
}

/// Point the image's table globals at `table` (null when there is none) and `len`.
fn point_globals(
    memory: &DeviceMemory,
    globals: &TableGlobals,
    table: Option<&DeviceBuffer>,
    len: usize,
) -> Result<(), PluginError> {
    let p = table.map_or(0, DeviceBuffer::addr).to_ne_bytes();
    let n = (len as u64).to_ne_bytes();
    let written = globals
        .fptr_map
        .map_or(Ok(()), |ours| {
            // SAFETY: `map_p` and `map_size` are the addresses of the image's 8-byte
            // table globals, resolved through the backend and size-checked against their
            // symbols.
            unsafe {
                memory
                    .write(ours.map_p, &p)
                    .and_then(|()| memory.write(ours.map_size, &n))
            }
        })
        .and_then(|()| {
            globals.llvm_indirect_call_table.map_or(Ok(()), |fields| {
                let pair: Vec<u8> = p.iter().chain(&n).copied().collect();
                // SAFETY: `fields` is 24 bytes into the image's LLVM 18 device
                // environment, whose size (48 bytes) was checked when it was written:
                // its 16 bytes there are the table pointer and row count.
                unsafe { memory.write(fields, &pair) }
            })
        });
    written.map_err(backend_err(
        memory.device() as i32,
        "writing the indirect table globals",
    ))
}

/// Write `value` byte for byte into one of the image's lookup globals (`what`: the
/// error's words).
fn write_global<T: bytemuck::Pod>(
    memory: &DeviceMemory,
    global: DeviceAddr,
    value: &T,
    what: &'static str,
) -> Result<(), PluginError> {
    // SAFETY: `global` is the address of an image's head or index header global, resolved
    // through the backend and size-checked against its symbol (device_rtl::head::HEAD_BYTES,
    // fptr_index::HEADER_BYTES: the sizes of the values written into each).
    unsafe { memory.write(global, bytemuck::bytes_of(value)) }
        .map_err(backend_err(memory.device() as i32, what))
}

/// Write a head into an image's head global.
fn write_head(
    memory: &DeviceMemory,
    global: DeviceAddr,
    head: &FptrHead,
) -> Result<(), PluginError> {
    write_global(memory, global, head, "writing the head global")
}

/// Write an index header into an image's index global.
fn write_index_header(
    memory: &DeviceMemory,
    global: DeviceAddr,
    header: &FptrIndex,
) -> Result<(), PluginError> {
    write_global(memory, global, header, "writing the index global")
}

/// The index of `rows` built in host memory, then copied to a device buffer (its
/// buckets 32-byte aligned inside it).
fn build_and_copy_index(
    memory: &DeviceMemory,
    rows: &[FptrMapEntry],
) -> Result<PlacedIndex, String> {
    let built = fptr_index::build(rows).map_err(fptr_index::describe)?;
    let bytes = built.as_bytes();
    let copy_failed = |e| format!("copying it to the device failed: {e}");
    // Room to start the buckets on a 32-byte boundary.
    let buffer = memory
        .alloc(bytes.len() + BUCKET_BYTES - 1, AllocKind::Device)
        .map_err(copy_failed)?;
    let buckets = fptr_index::aligned_buckets(buffer.addr());
    buffer
        .write_at((buckets - buffer.addr()) as usize, bytes)
        .map_err(copy_failed)?;
    Ok(PlacedIndex {
        index: DeviceIndex {
            header: built.header(buckets),
            buckets: buffer,
        },
        attempts: built.attempts,
    })
}
