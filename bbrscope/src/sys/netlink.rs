//! A minimal synchronous netlink client: enough for routes, qdiscs, links and socket diagnostics.
//!
//! Written against the kernel's wire format rather than a netlink crate because route changes
//! must send back every attribute of a dumped route untouched except the one being changed, and
//! that is simplest with the raw attributes in hand.

use std::{
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

pub(crate) const NETLINK_ROUTE: i32 = 0;
pub(crate) const NETLINK_SOCK_DIAG: i32 = 4;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_REPLACE: u16 = 0x100;
pub(crate) const NLM_F_CREATE: u16 = 0x400;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | (1 << 14));
const NETLINK_EXT_ACK: i32 = 11;
const NLMSGERR_ATTR_MSG: u16 = 1;
const HDR: usize = 16;

/// One reply message: its type and the bytes after the netlink header.
pub(crate) struct Message {
    pub(crate) kind: u16,
    pub(crate) data: Vec<u8>,
}

pub(crate) struct Netlink {
    fd: OwnedFd,
    seq: u32,
}

impl Netlink {
    /// A socket in the calling thread's network namespace.
    pub(crate) fn open(protocol: i32) -> io::Result<Self> {
        // SAFETY: socket(2) takes no pointers.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor socket(2) just returned, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Ask for the kernel's error text ("Nexthop device is not up", ...); best effort.
        let one: libc::c_int = 1;
        // SAFETY: the option value is a c_int that outlives the call, with its size passed.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_NETLINK,
                NETLINK_EXT_ACK,
                (&raw const one).cast(),
                size_of::<libc::c_int>() as u32,
            )
        };
        Ok(Netlink { fd, seq: 1 })
    }

    /// Sends one request and collects the replies: all parts of a dump, or the reply to a get,
    /// or nothing for an acknowledged change. A kernel error becomes an `io::Error` carrying
    /// the kernel's message when it gave one.
    pub(crate) fn request(&mut self, kind: u16, flags: u16, payload: &[u8]) -> io::Result<Vec<Message>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let len = HDR + payload.len();
        let mut buf = Vec::with_capacity(len);
        buf.extend_from_slice(&(len as u32).to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(payload);
        // SAFETY: sockaddr_nl is plain C data, valid when zeroed (pid 0: the kernel).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `buf` and `addr` outlive the call, with their lengths passed.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                0,
                (&raw const addr).cast(),
                size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut out = Vec::new();
        let mut rbuf = vec![0u8; 1 << 16];
        loop {
            // SAFETY: `rbuf` is writable for the length passed.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), rbuf.as_mut_ptr().cast(), rbuf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut rest = &rbuf[..n as usize];
            while rest.len() >= HDR {
                let mlen = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
                if mlen < HDR || mlen > rest.len() {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "truncated netlink message"));
                }
                let mkind = u16::from_ne_bytes(rest[4..6].try_into().unwrap());
                let mseq = u32::from_ne_bytes(rest[8..12].try_into().unwrap());
                let body = &rest[HDR..mlen];
                rest = &rest[align(mlen).min(rest.len())..];
                if mseq != seq {
                    continue;
                }
                match mkind {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let errno = i32::from_ne_bytes(body[0..4].try_into().unwrap());
                        if errno == 0 {
                            if dump {
                                continue;
                            }
                            return Ok(out);
                        }
                        return Err(kernel_error(-errno, body));
                    }
                    _ => {
                        out.push(Message { kind: mkind, data: body.to_vec() });
                        // A dump part, or a get's reply (its ACK follows).
                    }
                }
            }
        }
    }
}

/// The error with the kernel's extended-ack text, when present: it is usually more helpful than
/// the bare errno.
fn kernel_error(errno: i32, body: &[u8]) -> io::Error {
    let os = io::Error::from_raw_os_error(errno);
    // After the errno comes the offending request's header (16 bytes, the payload is capped
    // because we did not ask for it), then the ext-ack attributes.
    let msg = body.get(4 + HDR..).and_then(|a| attrs(a).find(|(t, _)| *t == NLMSGERR_ATTR_MSG)).map(|(_, v)| cstr(v));
    match msg {
        Some(m) if !m.is_empty() => io::Error::new(os.kind(), format!("{os}: {m}")),
        _ => os,
    }
}

const fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// Iterates over netlink attributes as (type, value), flags stripped from the type.
pub(crate) fn attrs(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            return None;
        }
        let value = &buf[4..len];
        buf = &buf[align(len).min(buf.len())..];
        Some((kind, value))
    })
}

/// A NUL-terminated string attribute.
pub(crate) fn cstr(v: &[u8]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

pub(crate) fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

/// Builds a run of attributes (possibly nested).
#[derive(Default)]
pub(crate) struct Attrs(pub Vec<u8>);

impl Attrs {
    pub(crate) fn put(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        let len = 4 + value.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(value);
        self.0.resize(align(self.0.len()), 0);
        self
    }

    pub(crate) fn put_str(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.put(kind, &v)
    }

    pub(crate) fn put_nested(&mut self, kind: u16, inner: &Attrs) -> &mut Self {
        self.put(kind | NLA_F_NESTED, &inner.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip() {
        let mut inner = Attrs::default();
        inner.put_str(16, "bbr").put(2, &1500u32.to_ne_bytes());
        let mut a = Attrs::default();
        a.put(1, &[10, 0, 0, 0]).put_nested(8, &inner);
        let got: Vec<(u16, Vec<u8>)> = attrs(&a.0).map(|(t, v)| (t, v.to_vec())).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (1, vec![10, 0, 0, 0]));
        assert_eq!(got[1].0, 8, "the nested flag is stripped");
        let nested: Vec<(u16, &[u8])> = attrs(&got[1].1).collect();
        assert_eq!(cstr(nested[0].1), "bbr");
        assert_eq!(u32_of(nested[1].1), Some(1500));
    }

    #[test]
    fn truncated_attributes_stop_iteration() {
        assert_eq!(attrs(&[8, 0, 1, 0, 0]).count(), 0);
        assert_eq!(attrs(&[]).count(), 0);
    }
}
