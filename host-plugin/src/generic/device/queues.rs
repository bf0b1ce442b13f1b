//! A device's asynchronous work: copies on the async info's queue, created on first use,
//! its synchronisation, and events.

use super::{token_event, AsyncInfo, Device};
use crate::backend::{DeviceAddr, EventHandle, QueueHandle};
use crate::generic::error::{backend_err, backend_err_with, PluginError};

impl Device {
    /// [`Device::write`] on the async info's queue (created on first use), or to
    /// completion where the device has no queues.
    ///
    /// # Safety
    /// `dst .. dst + len` is device memory of this device; `src .. src + len` is host
    /// memory that stays readable, and unwritten, until the queue is synchronized.
    pub unsafe fn write_async(
        &self,
        dst: DeviceAddr,
        src: *const u8,
        len: usize,
        info: &mut AsyncInfo,
    ) -> Result<(), PluginError> {
        let Some(queue) = self.queue(info)? else {
            // SAFETY: caller contract: `src` holds `len` readable bytes.
            let src = unsafe { std::slice::from_raw_parts(src, len) };
            // SAFETY: forwarded caller contract.
            return unsafe { self.write(dst, src) };
        };
        // SAFETY: forwarded caller contract; `queue` is this device's.
        unsafe { self.vendor.write_async(dst, src, len, queue) }
            .map_err(backend_err(self.id(), "queueing a copy to the device"))
    }

    /// [`Device::read`] on the async info's queue (created on first use), or to
    /// completion where the device has no queues.
    ///
    /// # Safety
    /// `src .. src + len` is device memory of this device; `dst .. dst + len` is host
    /// memory that nothing else reads or writes until the queue is synchronized.
    pub unsafe fn read_async(
        &self,
        src: DeviceAddr,
        dst: *mut u8,
        len: usize,
        info: &mut AsyncInfo,
    ) -> Result<(), PluginError> {
        let Some(queue) = self.queue(info)? else {
            // SAFETY: caller contract: `dst` holds `len` bytes nothing else uses now.
            let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
            // SAFETY: forwarded caller contract.
            return unsafe { self.read(src, dst) };
        };
        // SAFETY: forwarded caller contract; `queue` is this device's.
        unsafe { self.vendor.read_async(src, dst, len, queue) }
            .map_err(backend_err(self.id(), "queueing a copy from the device"))
    }

    /// Copy `len` bytes from this device to `to` (`__tgt_rtl_data_exchange[_async]`): on
    /// the async info's queue of this, the source, device when there is one (LLVM 16
    /// passes the source's), else to completion.
    ///
    /// # Safety
    /// `src .. src + len` is memory of this device and `dst .. dst + len` of `to`, both
    /// allocated until the copy completes (until the queue is synchronized).
    pub unsafe fn copy_to(
        &self,
        src: DeviceAddr,
        to: &Device,
        dst: DeviceAddr,
        len: usize,
        info: Option<&mut AsyncInfo>,
    ) -> Result<(), PluginError> {
        let what = || format!("copying {len} bytes to device {}", to.id());
        let queue = match info {
            Some(info) => self.queue(info)?,
            None => None,
        };
        // SAFETY: forwarded caller contract; `queue` is this device's.
        unsafe {
            match queue {
                Some(q) => self.vendor.copy_async(src, to.vendor.as_ref(), dst, len, q),
                None => self.vendor.copy(src, to.vendor.as_ref(), dst, len),
            }
        }
        .map_err(backend_err_with(self.id(), what))
    }

    /// Wait until everything asked of the device is done.
    pub fn synchronize(&self) -> Result<(), PluginError> {
        self.vendor
            .synchronize()
            .map_err(backend_err(self.id(), "synchronizing"))
    }

    /// The async info's queue, created on first use and kept in `info`; None where the
    /// device has no queues (everything then completes before it returns).
    pub(super) fn queue(&self, info: &mut AsyncInfo) -> Result<Option<QueueHandle>, PluginError> {
        if info.queue.is_none() {
            info.queue = self
                .vendor
                .queue_create()
                .map_err(backend_err(self.id(), "creating a queue"))?;
        }
        Ok(info.queue)
    }

    /// `__tgt_rtl_synchronize`: wait for the async info's queue and let it go (the info
    /// is empty afterwards, libomptarget's "complete"); without a queue, wait for the
    /// device.
    pub fn synchronize_queue(&self, info: &mut AsyncInfo) -> Result<(), PluginError> {
        match info.queue.take() {
            Some(queue) => self.finish_queue(queue),
            None => self.synchronize(),
        }
    }

    /// `__tgt_rtl_query_async`: if the async info's queue is done, let it go as
    /// [`Device::synchronize_queue`] does; if not, leave it. Without a queue (or an async
    /// info) everything is complete once the device is idle.
    pub fn query_queue(&self, info: Option<&mut AsyncInfo>) -> Result<(), PluginError> {
        let Some(info) = info else {
            return self.synchronize();
        };
        let Some(queue) = info.queue else {
            return self.synchronize();
        };
        let done = self
            .vendor
            .queue_done(queue)
            .map_err(backend_err_with(self.id(), || {
                format!("querying queue {queue:#x}")
            }))?;
        if done {
            info.queue = None;
            self.finish_queue(queue)?;
        }
        Ok(())
    }

    fn finish_queue(&self, queue: QueueHandle) -> Result<(), PluginError> {
        self.vendor
            .queue_finish(queue)
            .map_err(backend_err_with(self.id(), || {
                format!("finishing queue {queue:#x}")
            }))
    }

    /// A new event: the backend's, or [`token_event`] where every operation completes
    /// before it returns and there is nothing to wait for.
    pub fn event_create(&self) -> Result<EventHandle, PluginError> {
        let event = self
            .vendor
            .event_create()
            .map_err(backend_err(self.id(), "creating an event"))?;
        Ok(event.unwrap_or_else(token_event))
    }

    /// Mark the point the async info's queue (created on first use) has reached; without
    /// an async info, the device's default ordering.
    pub fn event_record(
        &self,
        event: EventHandle,
        info: Option<&mut AsyncInfo>,
    ) -> Result<(), PluginError> {
        if event == token_event() {
            return Ok(());
        }
        let queue = match info {
            Some(info) => self.queue(info)?,
            None => None,
        };
        self.vendor
            .event_record(event, queue)
            .map_err(backend_err(self.id(), "recording an event"))
    }

    /// Make later work on the async info's queue (created on first use) wait for the
    /// event.
    pub fn event_wait(
        &self,
        event: EventHandle,
        info: Option<&mut AsyncInfo>,
    ) -> Result<(), PluginError> {
        if event == token_event() {
            return Ok(());
        }
        let queue = match info {
            Some(info) => self.queue(info)?,
            None => None,
        };
        self.vendor
            .event_wait(event, queue)
            .map_err(backend_err(self.id(), "waiting for an event"))
    }

    pub fn event_sync(&self, event: EventHandle) -> Result<(), PluginError> {
        if event == token_event() {
            return Ok(());
        }
        self.vendor
            .event_sync(event)
            .map_err(backend_err(self.id(), "synchronizing an event"))
    }

    pub fn event_destroy(&self, event: EventHandle) -> Result<(), PluginError> {
        if event == token_event() {
            return Ok(());
        }
        self.vendor
            .event_destroy(event)
            .map_err(backend_err(self.id(), "destroying an event"))
    }
}
