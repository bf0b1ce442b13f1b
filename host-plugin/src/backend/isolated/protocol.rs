//! What the plugin and the isolated device process say to each other: one message per
//! `SOCK_SEQPACKET` packet (the kernel keeps packet boundaries), a tag and
//! little-endian fields. Image files travel beside a message as a descriptor
//! (`SCM_RIGHTS`); device memory is never sent through here (it is shared, see
//! [`super::arena`]), only the few bytes of image globals where the system refuses
//! `process_vm_readv`/`process_vm_writev`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// An address range `[start, end)`.
pub type Range = (u64, u64);

/// Host -> device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// The start-up check passed: map the arena, reserve everything else. `host` is
    /// every range mapped in the host process now (for the count of the ranges the
    /// device can reach, which must be 0).
    Setup {
        host: Vec<Range>,
    },
    /// The device process's mappings overlap the host's: exec yourself again (a new
    /// random layout).
    Retry,
    /// dlopen the image whose file comes with the message.
    Load,
    Unload {
        module: u64,
    },
    Symbol {
        module: u64,
        name: Vec<u8>,
    },
    /// Run `kernel(args...)`.
    Launch {
        kernel: u64,
        args: Vec<u64>,
    },
    /// Copy into or out of the device process's own memory (image globals), where
    /// `process_vm_writev`/`process_vm_readv` are refused.
    Write {
        addr: u64,
        bytes: Vec<u8>,
    },
    Read {
        addr: u64,
        len: u64,
    },
    /// How many of these host ranges the device can reach (the debug check before a
    /// launch).
    CheckHost {
        host: Vec<Range>,
    },
}

/// Device -> host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Sent first, after every exec: the device process and its mappings.
    Hello {
        pid: u32,
        mappings: Vec<Range>,
    },
    /// Set up: how many host ranges the device could still reach (0 in practice), how
    /// many ranges it reserved, and the ranges of its own the host must keep free.
    Ready {
        reachable_host_ranges: u64,
        reserved: u64,
        device: Vec<Range>,
    },
    Done,
    Loaded {
        module: u64,
        load_bias: u64,
    },
    Address {
        addr: u64,
    },
    Bytes {
        bytes: Vec<u8>,
    },
    Reachable {
        count: u64,
    },
    /// The request failed in the device process; `missing` marks a symbol not found.
    Failed {
        missing: bool,
        message: String,
    },
    /// A kernel faulted ([`FaultRecord`]); the device process waits to be ended.
    Fault(FaultRecord),
}

/// What the device process's signal handler knows about a fault, sent without
/// allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FaultRecord {
    pub signal: u64,
    /// `si_code`.
    pub code: u64,
    /// `si_addr`: the address the access faulted on.
    pub addr: u64,
    /// The faulting instruction.
    pub ip: u64,
    /// The x86 page-fault error code (`REG_ERR`): bit 1 a write, bit 4 a fetch.
    pub error_code: u64,
    /// The x86 trap number (`REG_TRAPNO`): 14 a page fault, 13 a protection fault.
    pub trap: u64,
    /// For a call to a bad address (`ip == addr`): the word at the stack pointer, the
    /// return address into the caller.
    pub return_address: u64,
}

impl FaultRecord {
    pub const WORDS: usize = 7;

    pub fn from_words(w: [u64; Self::WORDS]) -> Self {
        FaultRecord {
            signal: w[0],
            code: w[1],
            addr: w[2],
            ip: w[3],
            error_code: w[4],
            trap: w[5],
            return_address: w[6],
        }
    }

    pub fn words(&self) -> [u64; Self::WORDS] {
        [
            self.signal,
            self.code,
            self.addr,
            self.ip,
            self.error_code,
            self.trap,
            self.return_address,
        ]
    }

    /// The whole message, in a fixed buffer (the signal handler cannot allocate).
    pub fn encode(&self) -> [u8; 4 + 8 * Self::WORDS] {
        let mut out = [0u8; 4 + 8 * Self::WORDS];
        out[..4].copy_from_slice(&TAG_FAULT.to_le_bytes());
        for (i, w) in self.words().iter().enumerate() {
            out[4 + 8 * i..12 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

const TAG_FAULT: u32 = 100;

/// The largest packet either side sends (a Write of image-global bytes is split below
/// it; socket buffers hold at least this).
pub const MAX_PACKET: usize = 64 << 10;

struct Writer(Vec<u8>);

impl Writer {
    fn new(tag: u32) -> Self {
        Writer(tag.to_le_bytes().to_vec())
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(self, b: &[u8]) -> Self {
        let mut w = self.u64(b.len() as u64);
        w.0.extend_from_slice(b);
        w
    }
    fn words(self, v: &[u64]) -> Self {
        v.iter().fold(self.u64(v.len() as u64), |w, &x| w.u64(x))
    }
    fn ranges(self, v: &[Range]) -> Self {
        v.iter()
            .fold(self.u64(v.len() as u64), |w, &(a, b)| w.u64(a).u64(b))
    }
}

struct Reader<'a> {
    data: &'a [u8],
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed isolated-device message: {what}"),
    )
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.data.len() < n {
            return Err(malformed("truncated"));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn len(&mut self, item: usize) -> io::Result<usize> {
        let n = usize::try_from(self.u64()?).map_err(|_| malformed("length"))?;
        if n.checked_mul(item).is_none_or(|b| b > self.data.len()) {
            return Err(malformed("length beyond the message"));
        }
        Ok(n)
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.len(1)?;
        Ok(self.take(n)?.to_vec())
    }
    fn words(&mut self) -> io::Result<Vec<u64>> {
        let n = self.len(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
    fn ranges(&mut self) -> io::Result<Vec<Range>> {
        let n = self.len(16)?;
        (0..n).map(|_| Ok((self.u64()?, self.u64()?))).collect()
    }
    fn end(self) -> io::Result<()> {
        if self.data.is_empty() {
            Ok(())
        } else {
            Err(malformed("trailing bytes"))
        }
    }
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Setup { host } => Writer::new(1).ranges(host),
            Request::Retry => Writer::new(2),
            Request::Load => Writer::new(3),
            Request::Unload { module } => Writer::new(4).u64(*module),
            Request::Symbol { module, name } => Writer::new(5).u64(*module).bytes(name),
            Request::Launch { kernel, args } => Writer::new(6).u64(*kernel).words(args),
            Request::Write { addr, bytes } => Writer::new(7).u64(*addr).bytes(bytes),
            Request::Read { addr, len } => Writer::new(8).u64(*addr).u64(*len),
            Request::CheckHost { host } => Writer::new(9).ranges(host),
        }
        .0
    }

    pub fn decode(data: &[u8]) -> io::Result<Self> {
        let mut r = Reader { data };
        let request = match r.u32()? {
            1 => Request::Setup { host: r.ranges()? },
            2 => Request::Retry,
            3 => Request::Load,
            4 => Request::Unload { module: r.u64()? },
            5 => Request::Symbol {
                module: r.u64()?,
                name: r.bytes()?,
            },
            6 => Request::Launch {
                kernel: r.u64()?,
                args: r.words()?,
            },
            7 => Request::Write {
                addr: r.u64()?,
                bytes: r.bytes()?,
            },
            8 => Request::Read {
                addr: r.u64()?,
                len: r.u64()?,
            },
            9 => Request::CheckHost { host: r.ranges()? },
            tag => return Err(malformed(&format!("request tag {tag}"))),
        };
        r.end()?;
        Ok(request)
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Hello { pid, mappings } => Writer::new(50).u64(*pid as u64).ranges(mappings),
            Reply::Ready {
                reachable_host_ranges,
                reserved,
                device,
            } => Writer::new(51)
                .u64(*reachable_host_ranges)
                .u64(*reserved)
                .ranges(device),
            Reply::Done => Writer::new(52),
            Reply::Loaded { module, load_bias } => Writer::new(53).u64(*module).u64(*load_bias),
            Reply::Address { addr } => Writer::new(54).u64(*addr),
            Reply::Bytes { bytes } => Writer::new(55).bytes(bytes),
            Reply::Reachable { count } => Writer::new(56).u64(*count),
            Reply::Failed { missing, message } => Writer::new(57)
                .u64(*missing as u64)
                .bytes(message.as_bytes()),
            Reply::Fault(record) => return record.encode().to_vec(),
        }
        .0
    }

    pub fn decode(data: &[u8]) -> io::Result<Self> {
        let mut r = Reader { data };
        let reply = match r.u32()? {
            50 => Reply::Hello {
                pid: u32::try_from(r.u64()?).map_err(|_| malformed("pid"))?,
                mappings: r.ranges()?,
            },
            51 => Reply::Ready {
                reachable_host_ranges: r.u64()?,
                reserved: r.u64()?,
                device: r.ranges()?,
            },
            52 => Reply::Done,
            53 => Reply::Loaded {
                module: r.u64()?,
                load_bias: r.u64()?,
            },
            54 => Reply::Address { addr: r.u64()? },
            55 => Reply::Bytes { bytes: r.bytes()? },
            56 => Reply::Reachable { count: r.u64()? },
            57 => Reply::Failed {
                missing: r.u64()? != 0,
                message: String::from_utf8_lossy(&r.bytes()?).into_owned(),
            },
            TAG_FAULT => {
                let mut w = [0u64; FaultRecord::WORDS];
                for x in &mut w {
                    *x = r.u64()?;
                }
                Reply::Fault(FaultRecord::from_words(w))
            }
            tag => return Err(malformed(&format!("reply tag {tag}"))),
        };
        r.end()?;
        Ok(reply)
    }
}

/// A connected pair of packet sockets (close-on-exec): the plugin keeps one end, the
/// device process gets the other.
pub fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two new descriptors into `fds`.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are fresh and owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send one packet, with `fd` beside it where given.
pub fn send(socket: BorrowedFd<'_>, packet: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: packet.as_ptr() as *mut libc::c_void,
        iov_len: packet.len(),
    };
    let mut control = ControlBuffer::new();
    // SAFETY: an all-zero msghdr is a valid empty one; every pointer set below points at
    // a live local (`iov`, `control`) for the duration of the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        control.put_fd(&mut msg, fd.as_raw_fd());
    }
    loop {
        // SAFETY: `msg` describes one readable buffer and (maybe) a filled control
        // buffer, both alive during the call; the socket is a descriptor we own.
        let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return if n as usize == packet.len() {
                Ok(())
            } else {
                Err(io::Error::new(io::ErrorKind::WriteZero, "short packet"))
            };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receive one packet (Ok(None) at end of stream), with the descriptor that came with
/// it, if any.
pub fn receive(socket: BorrowedFd<'_>) -> io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_PACKET];
    Ok(receive_into(socket, &mut buf)?.map(|(n, fd)| {
        buf.truncate(n);
        (buf, fd)
    }))
}

/// [`receive`] into `buf` (at least [`MAX_PACKET`] bytes, reused between calls): the
/// packet's length and descriptor.
pub fn receive_into(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<Option<(usize, Option<OwnedFd>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = ControlBuffer::new();
    // SAFETY: as in `send`; the buffers outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control.0) as _;
    let n = loop {
        // SAFETY: `msg` describes writable buffers alive during the call.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let fd = control.take_fd(&msg);
    if n == 0 && fd.is_none() {
        return Ok(None);
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(malformed("packet larger than the buffer"));
    }
    Ok(Some((n, fd)))
}

/// Room for one `SCM_RIGHTS` message carrying one descriptor (u64 words: the
/// alignment `cmsghdr` needs).
struct ControlBuffer([u64; 4]);

impl ControlBuffer {
    fn new() -> Self {
        ControlBuffer([0; 4])
    }

    fn put_fd(&mut self, msg: &mut libc::msghdr, fd: i32) {
        msg.msg_control = self.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) } as _;
        // SAFETY: the control buffer (32 bytes, aligned) holds CMSG_SPACE(4) = 24 bytes,
        // so CMSG_FIRSTHDR returns a header inside it and its data has room for one int.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<i32>(), fd);
        }
    }

    /// The descriptor a received message carried (the kernel installed it in this
    /// process; it is ours to close).
    fn take_fd(&mut self, msg: &libc::msghdr) -> Option<OwnedFd> {
        if msg.msg_controllen == 0 {
            return None;
        }
        // SAFETY: `msg` was filled by recvmsg with this buffer as its control buffer;
        // CMSG_FIRSTHDR/CMSG_NXTHDR stay inside the length the kernel wrote.
        unsafe {
            let mut header = libc::CMSG_FIRSTHDR(msg);
            while !header.is_null() {
                if (*header).cmsg_level == libc::SOL_SOCKET
                    && (*header).cmsg_type == libc::SCM_RIGHTS
                {
                    let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<i32>());
                    return Some(OwnedFd::from_raw_fd(fd));
                }
                header = libc::CMSG_NXTHDR(msg, header);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_survives_encoding() {
        let requests = [
            Request::Setup {
                host: vec![(0x1000, 0x2000), (0x5000, 0x9000)],
            },
            Request::Retry,
            Request::Load,
            Request::Unload { module: 7 },
            Request::Symbol {
                module: 1,
                name: b"__omp_offloading_fptr_map_p".to_vec(),
            },
            Request::Launch {
                kernel: 0x7000_0000_1000,
                args: vec![1, 2, u64::MAX],
            },
            Request::Write {
                addr: 0x10,
                bytes: vec![1, 2, 3],
            },
            Request::Read { addr: 0x10, len: 3 },
            Request::CheckHost { host: vec![] },
        ];
        for r in requests {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        let replies = [
            Reply::Hello {
                pid: 42,
                mappings: vec![(1, 2)],
            },
            Reply::Ready {
                reachable_host_ranges: 0,
                reserved: 12,
                device: vec![(3, 4)],
            },
            Reply::Done,
            Reply::Loaded {
                module: 3,
                load_bias: 0x7f00_0000_0000,
            },
            Reply::Address { addr: 9 },
            Reply::Bytes { bytes: vec![9; 20] },
            Reply::Reachable { count: 0 },
            Reply::Failed {
                missing: true,
                message: "no such symbol".into(),
            },
            Reply::Fault(FaultRecord {
                signal: 11,
                code: 2,
                addr: 0x5555_0000_1000,
                ip: 0x4000_0000_0000,
                error_code: 0x14,
                trap: 14,
                return_address: 0x4000_0000_0040,
            }),
        ];
        for r in replies {
            assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for bad in [
            &[][..],
            &[6, 0, 0, 0][..],
            &[
                6, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ][..],
            &[99, 0, 0, 0][..],
            &[2, 0, 0, 0, 1][..],
        ] {
            assert!(Request::decode(bad).is_err(), "{bad:?}");
            assert!(Reply::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_descriptor_travels_beside_a_packet() {
        let (a, b) = socket_pair().unwrap();
        let (file, _) =
            crate::backend::host_common::dlopen::image_descriptor(b"image bytes").unwrap();
        use std::os::fd::AsFd;
        send(a.as_fd(), &Request::Load.encode(), Some(file.as_fd())).unwrap();
        let (packet, fd) = receive(b.as_fd()).unwrap().unwrap();
        assert_eq!(Request::decode(&packet).unwrap(), Request::Load);
        let mut received = std::fs::File::from(fd.expect("the descriptor came along"));
        use std::io::{Read, Seek};
        received.rewind().unwrap();
        let mut text = String::new();
        received.read_to_string(&mut text).unwrap();
        assert_eq!(text, "image bytes");
        drop(a);
        assert!(receive(b.as_fd()).unwrap().is_none(), "end of stream");
    }
}
