//! Where benchmark traffic flows: loopback in this network namespace, or a veth pair between two
//! namespaces the benchmark creates and deletes (also those an interrupted run left behind).

use std::{fs::File, net::Ipv4Addr, os::fd::AsRawFd as _, process::Command, thread};

use anyhow::{Context as _, Result, bail};

const PREFIX: &str = "bbrbench-";

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// A network namespace (`ip netns add`), deleted on drop.
pub(super) struct Netns {
    name: String,
}

impl Netns {
    fn create(role: &str) -> Result<Netns> {
        let name = format!("{PREFIX}{role}-{}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.exec(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn exec(&self, args: &[&str]) -> Result<()> {
        ip(&[&["-n", &self.name], args].concat())
    }

    /// The namespace's file, for [`setns`].
    pub(super) fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Runs `f` on a thread inside this namespace. A socket keeps the namespace it was created
    /// in, so what `f` creates can be used from any thread afterwards.
    pub(super) fn run<T: Send + 'static>(&self, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
        let path = self.path();
        thread::spawn(move || {
            setns(&path)?;
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("thread in namespace {} panicked", self.name))?
    }
}

/// Moves the calling thread into the namespace at `path`: sockets it creates, and processes it
/// spawns, live there.
pub(super) fn setns(path: &str) -> Result<()> {
    let ns = File::open(path).with_context(|| format!("opening {path}"))?;
    // SAFETY: setns(2) on the fd of a namespace file held open for the call; no memory is passed.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!("setns {path}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Two namespaces joined by a veth pair: senders in one, receivers in the other.
pub(super) struct Veth {
    pub sender: Netns,
    pub receiver: Netns,
    pub receiver_ip: Ipv4Addr,
}

impl Veth {
    pub(super) fn create() -> Result<Veth> {
        let sender = Netns::create("tx")?;
        let receiver = Netns::create("rx")?;
        // Interface names are at most 15 bytes.
        let id = std::process::id() % 1_000_000;
        let (tx, rx) = (format!("bbrb{id}t"), format!("bbrb{id}r"));
        ip(&["link", "add", &tx, "netns", &sender.name, "type", "veth", "peer", "name", &rx, "netns", &receiver.name])?;
        let (sender_ip, receiver_ip) = (Ipv4Addr::new(10, 252, 0, 1), Ipv4Addr::new(10, 252, 0, 2));
        sender.exec(&["addr", "add", &format!("{sender_ip}/24"), "dev", &tx])?;
        receiver.exec(&["addr", "add", &format!("{receiver_ip}/24"), "dev", &rx])?;
        sender.exec(&["link", "set", &tx, "up"])?;
        receiver.exec(&["link", "set", &rx, "up"])?;
        Ok(Veth { sender, receiver, receiver_ip })
    }
}

/// Deletes namespaces left by benchmark runs whose process is gone.
pub(super) fn remove_stale() -> Result<()> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else { return Ok(()) };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.rsplit_once('-')).map(|(_, pid)| pid) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            ip(&["netns", "del", &name])?;
        }
    }
    Ok(())
}
