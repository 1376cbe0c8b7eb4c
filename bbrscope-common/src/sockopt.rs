//! Socket options of TCP sockets: the one door through which the product, its tests and xtask
//! read `TCP_INFO`, `TCP_CC_INFO` and `TCP_CONGESTION` and set options. The tests check bbrscope
//! against what the kernel says here, so this module computes nothing: it copies the kernel's
//! fields out by their uapi offsets.
//!
//! Options that rustix covers go through rustix; the rest (`TCP_INFO`, `TCP_CC_INFO`, options
//! with a plain integer or struct value) through the one raw `getsockopt`/`setsockopt` pair
//! below.

use std::{
    io,
    os::fd::{AsFd, AsRawFd},
    string::String,
    time::Duration,
};

/// `TCP_CC_INFO` (linux/tcp.h; absent from the libc crate).
const TCP_CC_INFO: i32 = 26;

/// `TCP_CLOSE` in `enum tcp_state` ([`TcpInfo::state`]): a socket's counters are final there.
pub const TCP_CLOSE: u8 = 7;

/// The fields of `struct tcp_info` (linux/tcp.h) that bbrscope reads, from getsockopt(TCP_INFO)
/// ([`tcp_info`]) or a sock_diag reply's INET_DIAG_INFO ([`TcpInfo::parse`]). The layout is
/// uapi: fields are only ever appended, so these offsets hold on every kernel; the ones that
/// came after 4.x are `None` where the running kernel's struct is shorter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// Bytes the kernel filled in (232 on 5.10, more on newer kernels).
    pub len: usize,
    /// tcpi_state: `enum tcp_state` (1 established … 7 close).
    pub state: u8,
    /// tcpi_ca_state: 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss.
    pub ca_state: u8,
    /// tcpi_delivery_rate_app_limited: whether the latest rate sample was app-limited.
    pub app_limited: bool,
    /// tcpi_snd_mss, bytes.
    pub snd_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    /// Smoothed RTT and its variation, µs (tcpi_rtt, tcpi_rttvar).
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_ssthresh: u32,
    /// tcpi_snd_cwnd, segments.
    pub snd_cwnd: u32,
    pub total_retrans: u32,
    /// tcpi_pacing_rate, bytes per second (u64::MAX: unlimited).
    pub pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    /// tcpi_min_rtt, µs.
    pub min_rtt_us: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    /// tcpi_delivery_rate, bytes per second.
    pub delivery_rate: u64,
    pub delivered: u32,
    pub bytes_sent: Option<u64>,
    pub bytes_retrans: Option<u64>,
    pub snd_wnd: Option<u32>,
    /// The chrono counters, µs (`tcpi_busy_time`, `tcpi_rwnd_limited`, `tcpi_sndbuf_limited`).
    pub busy_us: Option<u64>,
    pub rwnd_limited_us: Option<u64>,
    pub sndbuf_limited_us: Option<u64>,
    /// The receive side: tcpi_rcv_ssthresh (the window the receiver may grow its advertisement
    /// to now, bytes), tcpi_rcv_rtt (the receiver's RTT estimate, µs) and tcpi_rcv_space (the
    /// most the application read in one of those round trips, bytes).
    pub rcv_ssthresh: u32,
    pub rcv_rtt_us: u32,
    pub rcv_space: u32,
}

impl TcpInfo {
    /// A `struct tcp_info` as the kernel wrote it; `None` when it is shorter than 4.x's (up to
    /// tcpi_delivered).
    pub fn parse(b: &[u8]) -> Option<Self> {
        let u32_at = |o: usize| b.get(o..o + 4).map(|s| u32::from_ne_bytes(s.try_into().expect("4 bytes")));
        let u64_at = |o: usize| b.get(o..o + 8).map(|s| u64::from_ne_bytes(s.try_into().expect("8 bytes")));
        Some(TcpInfo {
            len: b.len(),
            state: *b.first()?,
            ca_state: *b.get(1)?,
            // The bit field after tcpi_snd_wscale/tcpi_rcv_wscale: its lowest bit.
            app_limited: b.get(7)? & 1 != 0,
            snd_mss: u32_at(16)?,
            unacked: u32_at(24)?,
            sacked: u32_at(28)?,
            lost: u32_at(32)?,
            retrans: u32_at(36)?,
            rtt_us: u32_at(68)?,
            rttvar_us: u32_at(72)?,
            snd_ssthresh: u32_at(76)?,
            snd_cwnd: u32_at(80)?,
            total_retrans: u32_at(100)?,
            pacing_rate: u64_at(104)?,
            bytes_acked: u64_at(120)?,
            bytes_received: u64_at(128)?,
            segs_out: u32_at(136)?,
            segs_in: u32_at(140)?,
            min_rtt_us: u32_at(148)?,
            data_segs_in: u32_at(152)?,
            data_segs_out: u32_at(156)?,
            delivery_rate: u64_at(160)?,
            delivered: u32_at(192)?,
            bytes_sent: u64_at(200),
            bytes_retrans: u64_at(208),
            snd_wnd: u32_at(228),
            busy_us: u64_at(168),
            rwnd_limited_us: u64_at(176),
            sndbuf_limited_us: u64_at(184),
            rcv_ssthresh: u32_at(64)?,
            rcv_rtt_us: u32_at(92)?,
            rcv_space: u32_at(96)?,
        })
    }
}

/// getsockopt(TCP_INFO).
pub fn tcp_info(fd: impl AsFd) -> io::Result<TcpInfo> {
    let mut buf = [0u8; 256];
    let len = get(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut buf)?;
    TcpInfo::parse(&buf[..len])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, std::format!("TCP_INFO of {len} bytes")))
}

/// BBR's bandwidth estimate in bytes per second, as getsockopt(TCP_CC_INFO) reports it
/// (`struct tcp_bbr_info`: bbr_bw_lo, bbr_bw_hi); `None` for an algorithm that reports nothing
/// there.
pub fn bbr_bandwidth(fd: impl AsFd) -> io::Result<Option<u64>> {
    let mut buf = [0u8; 64];
    let len = get(fd, libc::IPPROTO_TCP, TCP_CC_INFO, &mut buf)?;
    let u32_at = |o: usize| u64::from(u32::from_ne_bytes(buf[o..o + 4].try_into().expect("4 bytes")));
    Ok((len >= 20).then(|| u32_at(0) | u32_at(4) << 32))
}

/// The socket's congestion-control algorithm (getsockopt(TCP_CONGESTION)).
/// Read raw rather than through rustix, whose reader panics on a name without a NUL.
pub fn congestion(fd: impl AsFd) -> io::Result<String> {
    let mut buf = [0u8; crate::CC_NAME_LEN];
    let len = get(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, &mut buf)?;
    let name = buf[..len].split(|&b| b == 0).next().unwrap_or_default();
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// setsockopt(TCP_CONGESTION). Root may pick any available algorithm per socket, also one
/// missing from net.ipv4.tcp_allowed_congestion_control.
pub fn set_congestion(fd: impl AsFd, algorithm: &str) -> io::Result<()> {
    rustix::net::sockopt::set_tcp_congestion(fd, algorithm).map_err(io::Error::from)
}

/// SO_LINGER with a zero timeout: closing resets the connection (no FIN exchange, no TIME_WAIT).
pub fn set_reset_on_close(fd: impl AsFd) -> io::Result<()> {
    rustix::net::sockopt::set_socket_linger(fd, Some(Duration::ZERO)).map_err(io::Error::from)
}

/// SO_SNDTIMEO (which `connect` also honours).
pub fn set_send_timeout(fd: impl AsFd, timeout: Duration) -> io::Result<()> {
    rustix::net::sockopt::set_socket_timeout(fd, rustix::net::sockopt::Timeout::Send, Some(timeout))
        .map_err(io::Error::from)
}

/// The socket's send buffer (`SO_SNDBUF`: the kernel's `sk_sndbuf`, twice what was last asked).
pub fn send_buffer(fd: impl AsFd) -> io::Result<usize> {
    rustix::net::sockopt::socket_send_buffer_size(fd).map_err(io::Error::from)
}

/// The socket's receive buffer (`SO_RCVBUF`: the kernel's `sk_rcvbuf`, as autotuning left it).
pub fn receive_buffer(fd: impl AsFd) -> io::Result<usize> {
    rustix::net::sockopt::socket_recv_buffer_size(fd).map_err(io::Error::from)
}

/// The largest window the socket may advertise (`TCP_WINDOW_CLAMP`: the kernel's
/// `window_clamp`, which autotuning sets from the receive buffer).
pub fn window_clamp(fd: impl AsFd) -> io::Result<u32> {
    let mut buf = [0u8; 4];
    let len = get(fd, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, &mut buf)?;
    if len != 4 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, std::format!("TCP_WINDOW_CLAMP of {len} bytes")));
    }
    Ok(u32::from_ne_bytes(buf))
}

/// Sets `SO_SNDBUF` (the kernel doubles what is asked and stops autotuning the buffer).
pub fn set_send_buffer(fd: impl AsFd, bytes: usize) -> io::Result<()> {
    rustix::net::sockopt::set_socket_send_buffer_size(fd, bytes).map_err(io::Error::from)
}

/// setsockopt of an option whose value is a C `int` (TCP_MAXSEG, TCP_FASTOPEN, SO_REUSEADDR, …).
pub fn set_int(fd: impl AsFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    set(fd, level, name, &value)
}

/// setsockopt of an option whose value is a 64-bit integer (SO_MAX_PACING_RATE).
pub fn set_u64(fd: impl AsFd, level: i32, name: i32, value: u64) -> io::Result<()> {
    set(fd, level, name, &value)
}

/// The raw setsockopt: integers only, so no padding bytes ever reach the kernel.
fn set<T: Copy + Into<i128>>(fd: impl AsFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    let len = size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel reads `len` bytes from `value`, a live integer of that size.
    let r =
        unsafe { libc::setsockopt(fd.as_fd().as_raw_fd(), level, name, core::ptr::from_ref::<T>(value).cast(), len) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The raw getsockopt into a byte buffer; returns how many bytes the kernel wrote.
fn get(fd: impl AsFd, level: i32, name: i32, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `buf`, which outlives the call, and
    // stores the length it wrote in `len`.
    let r = unsafe { libc::getsockopt(fd.as_fd().as_raw_fd(), level, name, buf.as_mut_ptr().cast(), &raw mut len) };
    if r == 0 { Ok(len as usize) } else { Err(io::Error::last_os_error()) }
}
