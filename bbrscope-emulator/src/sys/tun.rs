//! TUN devices and interface settings through the classic ioctls: enough for one IPv4 address,
//! a txqueuelen and `up`, without a netlink dependency. Must run on a thread inside the target
//! namespace ([`crate::Netns::run`]).

use std::{
    ffi::CStr,
    fs::OpenOptions,
    io,
    net::Ipv4Addr,
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::fs::OpenOptionsExt,
    },
};

use rustix::net::{AddressFamily, SocketFlags, SocketType, socket_with};

/// A TUN device that exists while `fd` is open (not persistent). No `IFF_VNET_HDR` and no
/// TUNSETOFFLOAD: the kernel keeps checksum and segmentation offloads off for it, so every read
/// is one IP packet of at most the MTU, and loss applies per packet.
pub(crate) fn create(name: &CStr) -> io::Result<OwnedFd> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")?;
    let mut req = ifreq(name);
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads an ifreq, which `req` is.
    check(unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
    Ok(file.into())
}

/// Addresses `name` with `addr/prefix`, sets its transmit queue length and brings it up.
pub(crate) fn configure(name: &CStr, addr: Ipv4Addr, prefix: u8, txqueuelen: u32) -> io::Result<()> {
    let sock = control_socket()?;
    let mut req = ifreq(name);
    req.ifr_ifru.ifru_addr = sockaddr_in(addr);
    ioctl(&sock, libc::SIOCSIFADDR, &mut req)?;
    let mask = Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0));
    req.ifr_ifru.ifru_netmask = sockaddr_in(mask);
    ioctl(&sock, libc::SIOCSIFNETMASK, &mut req)?;
    req.ifr_ifru.ifru_metric = txqueuelen as libc::c_int; // ifr_qlen shares the int slot
    ioctl(&sock, libc::SIOCSIFTXQLEN, &mut req)?;
    up_with(&sock, name)
}

/// Brings an interface up (e.g. `lo`).
pub(crate) fn up(name: &CStr) -> io::Result<()> {
    up_with(&control_socket()?, name)
}

fn up_with(sock: &OwnedFd, name: &CStr) -> io::Result<()> {
    let mut req = ifreq(name);
    ioctl(sock, libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    ioctl(sock, libc::SIOCSIFFLAGS, &mut req)
}

fn control_socket() -> io::Result<OwnedFd> {
    Ok(socket_with(AddressFamily::INET, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?)
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn ioctl(sock: &OwnedFd, request: libc::c_ulong, req: &mut libc::ifreq) -> io::Result<()> {
    // The request numbers are `c_ulong` in libc; the call takes glibc's `c_ulong` or musl's `c_int`
    // (`libc::Ioctl`), and every number here fits both.
    // SAFETY: every request used here takes a `struct ifreq`.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), request as libc::Ioctl, std::ptr::from_mut::<libc::ifreq>(req)) })
}

fn ifreq(name: &CStr) -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.to_bytes().iter().take(libc::IFNAMSIZ - 1)) {
        *dst = src as libc::c_char;
    }
    req
}

fn sockaddr_in(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(addr).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size; the kernel reads it by family.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}
