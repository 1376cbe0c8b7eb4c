//! Anonymous network namespaces, held only by a file descriptor: never named under /run/netns,
//! never entered by the main thread. When the last descriptor (or socket, or device fd) inside
//! goes — on exit, on a crash, on SIGKILL — the kernel destroys the namespace and its devices.

use std::{
    fs::File,
    os::fd::{AsFd as _, OwnedFd},
    thread,
};

use anyhow::{Context as _, Result, anyhow};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

use crate::sys;

pub struct Netns(OwnedFd);

impl Netns {
    /// A new, empty namespace (only `lo`, down).
    pub fn new() -> Result<Self> {
        on_thread(|| {
            sys::thread::unshare_netns().context("creating a network namespace (unshare)")?;
            let file = File::open("/proc/thread-self/ns/net").context("opening the new namespace")?;
            Ok(Netns(file.into()))
        })
    }

    /// Runs `f` on a thread inside this namespace: sockets and devices it creates live here,
    /// and stay here when used from other threads.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        on_thread(|| {
            move_into_link_name_space(self.0.as_fd(), Some(LinkNameSpaceType::Network))
                .map_err(std::io::Error::from)
                .context("entering the emulator's network namespace")?;
            f()
        })
    }

    /// Writes a sysctl of this namespace (`net.ipv4.tcp_rmem` as `"net/ipv4/tcp_rmem"`): /proc/sys/net
    /// resolves to the namespace of the thread that opens it.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.run(|| {
            std::fs::write(format!("/proc/sys/{key}"), value).with_context(|| format!("setting {key} in the emulator"))
        })
    }
}

/// A thread of its own, so namespace changes never touch the caller's thread.
fn on_thread<T: Send>(f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    thread::scope(|s| s.spawn(f).join().map_err(|_| anyhow!("namespace helper thread panicked"))?)
}
