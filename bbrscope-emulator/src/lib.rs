//! A self-contained, Mahimahi-style emulated path (netem is missing on many kernels): two
//! throwaway network namespaces, a TUN device in each, and a userspace packet mover between them
//! applying [`link_model`]. Everything is held by file descriptors of this process, so nothing
//! outlives it however it ends.
//!
//! A crate of its own so that bbrscope's demo, its integration tests and xtask's benchmark share
//! one emulator without xtask depending on the product. It holds the calls to the OS only it
//! makes (TUN devices, a thread's namespace and real-time priority, in `sys`) and the seeded
//! generator its losses draw from ([`rng`], which the product uses too).

mod link_model;
mod loss;
mod mover;
mod netns;
pub mod rng;
mod sys;

use std::{ffi::CStr, net::Ipv4Addr, os::fd::OwnedFd};

use anyhow::{Context as _, Result};
use ipnet::Ipv4Net;

pub use link_model::LinkConfig;
pub use loss::LossSpec;
pub use mover::LinkCounters;
pub use netns::Netns;

use mover::Mover;

use sys::tun;

const DEVICE: &CStr = c"emu0";
/// Generous, so the TUN ring never drops before the mover reads: the only queue that may drop
/// is the emulated one.
const TXQUEUELEN: u32 = 10_000;
/// Where the links' addresses come from: RFC 2544's benchmarking range. They exist only inside
/// the links' own namespaces; no packet to them ever reaches a real network.
pub const ADDRESSES: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(198, 18, 0, 0), 15);
/// The MTU of the emulated devices (the TUN default): the largest packet the link carries.
pub const MTU: u64 = 1500;

/// One emulated path: sender namespace -> data direction -> receiver namespace, and back.
pub struct Link {
    pub sender: Netns,
    pub receiver: Netns,
    pub sender_addr: Ipv4Addr,
    pub receiver_addr: Ipv4Addr,
    mover: Mover,
}

impl Link {
    /// Builds link number `index` (sender 198.18.<index>.1, receiver .2).
    pub fn new(index: u8, cfg: &LinkConfig) -> Result<Self> {
        let [a, b, ..] = ADDRESSES.network().octets();
        let sender_addr = Ipv4Addr::new(a, b, index, 1);
        let receiver_addr = Ipv4Addr::new(a, b, index, 2);
        let (sender, receiver) = (Netns::new()?, Netns::new()?);
        let sender_tun = endpoint(&sender, sender_addr)?;
        let receiver_tun = endpoint(&receiver, receiver_addr)?;
        // Room for a sender to keep several times the path's capacity in flight: the TCP
        // buffers of these namespaces only (a new namespace starts from the kernel defaults).
        let bdp = (cfg.rate_bps as f64 / 8.0 * cfg.rtt.as_secs_f64()) as u64 + cfg.buffer_bytes;
        // At most what the kernel takes (an int): a 1 Gbit/s path of 10 s would ask for more.
        let max = (4 * bdp).clamp(4 << 20, i32::MAX as u64);
        for ns in [&sender, &receiver] {
            ns.sysctl("net/ipv4/tcp_wmem", &format!("4096 16384 {max}"))?;
            ns.sysctl("net/ipv4/tcp_rmem", &format!("4096 131072 {}", max.max(32 << 20)))?;
        }
        let mover = Mover::start(sender_tun, receiver_tun, cfg)?;
        Ok(Link { sender, receiver, sender_addr, receiver_addr, mover })
    }

    /// Stops the emulator and returns its final counters.
    pub fn close(mut self) -> Result<LinkCounters> {
        self.mover.stop()?;
        Ok(self.mover.counters())
    }
}

/// `lo` up and a configured TUN device inside `ns`; returns the device's descriptor.
fn endpoint(ns: &Netns, addr: Ipv4Addr) -> Result<OwnedFd> {
    // No IPv6 on the link: router solicitations and MLD reports would otherwise cross the data
    // direction, take their share of the random losses and shift the seeded pattern.
    if std::path::Path::new("/proc/sys/net/ipv6").exists() {
        ns.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
    }
    ns.run(|| {
        tun::up(c"lo").context("bringing up lo")?;
        let fd = tun::create(DEVICE).context("creating a TUN device (is /dev/net/tun available?)")?;
        tun::configure(DEVICE, addr, 24, TXQUEUELEN).context("configuring the TUN device")?;
        Ok(fd)
    })
}
