//! Proof on real sockets: open a TCP connection where the change applies and ask the kernel
//! (getsockopt TCP_CONGESTION) which algorithm it actually got.

use std::{
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::Path,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use rustix::net::{AddressFamily, SocketFlags, SocketType, socket_with};
use serde::Serialize;

use crate::sys::{self, sockopt};

/// What a verification connection got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Probe {
    /// The connecting side's algorithm (the side the change is about).
    pub(crate) algorithm: String,
    /// How it was obtained, in words.
    pub(crate) how: String,
}

/// A loopback connection in the calling thread's namespace. A namespace whose loopback is down
/// (fresh `ip netns add`) cannot connect; a new, unconnected socket gets the same default then,
/// and the result says so.
pub(crate) fn loopback() -> Result<Probe> {
    let connected = (|| -> std::io::Result<Probe> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let client = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        let (_server, _) = listener.accept()?;
        Ok(Probe {
            algorithm: sockopt::congestion(&client)?,
            how: format!("new TCP connection {} -> {addr}", client.local_addr()?),
        })
    })();
    match connected {
        Ok(p) => Ok(p),
        Err(e) => {
            let fd = socket_with(AddressFamily::INET, SocketType::STREAM, SocketFlags::CLOEXEC, None)
                .map_err(std::io::Error::from)
                .context("creating a TCP socket")?;
            Ok(Probe {
                algorithm: sockopt::congestion(&fd)?,
                how: format!("new TCP socket (no loopback connection possible here: {e})"),
            })
        }
    }
}

/// A loopback connection made by a child process placed in `cgroup`: the sock_ops program runs
/// for sockets of processes in the cgroup, and a whole process (not a thread) must move there.
/// The child is forked and only makes system calls (no allocation), which is safe in a
/// multi-threaded parent. The accepting side stays in bbrscope's cgroup, for contrast.
pub(crate) fn in_cgroup(cgroup: &Path) -> Result<(Probe, Probe)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("listening on loopback for verification")?;
    let addr = match listener.local_addr()? {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => bail!("loopback listener is not IPv4"),
    };
    let algorithm = sys::cgroup::congestion_of_connection_from(cgroup, addr)?;
    let (server, _) = listener.accept().context("accepting the verification connection")?;
    let inside =
        Probe { algorithm, how: format!("new TCP connection from a process in {} to {addr}", cgroup.display()) };
    let outside =
        Probe { algorithm: sockopt::congestion(&server)?, how: "its accepting side, in bbrscope's own cgroup".into() };
    Ok((inside, outside))
}
