//! Proof on real sockets: open a TCP connection where the change applies and ask the kernel
//! (getsockopt TCP_CONGESTION) which algorithm it actually got.

use std::{
    ffi::CString,
    io::Read as _,
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::Path,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use bbrscope_common::CC_NAME_LEN as NAME_MAX;
use libc::TCP_CONGESTION;

/// What a verification connection got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probe {
    /// The connecting side's algorithm (the side the change is about).
    pub algorithm: String,
    /// How it was obtained, in words.
    pub how: String,
}

pub fn congestion_of(fd: i32) -> std::io::Result<String> {
    let mut buf = [0u8; NAME_MAX];
    let mut len = NAME_MAX as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes; the kernel stores the length it wrote in `len`.
    if unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, TCP_CONGESTION, buf.as_mut_ptr().cast(), &mut len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(crate::sys::netlink::cstr(&buf[..len as usize]))
}

/// A loopback connection in the calling thread's namespace. A namespace whose loopback is down
/// (fresh `ip netns add`) cannot connect; a new, unconnected socket gets the same default then,
/// and the result says so.
pub fn loopback() -> Result<Probe> {
    let connected = (|| -> std::io::Result<Probe> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let client = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        let (_server, _) = listener.accept()?;
        Ok(Probe {
            algorithm: congestion_of(client.as_raw_fd())?,
            how: format!("new TCP connection {} -> {addr}", client.local_addr()?),
        })
    })();
    match connected {
        Ok(p) => Ok(p),
        Err(e) => {
            // SAFETY: socket(2) takes no pointers.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error()).context("creating a TCP socket");
            }
            // SAFETY: a descriptor socket(2) just returned, owned by nothing else.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            Ok(Probe {
                algorithm: congestion_of(fd.as_raw_fd())?,
                how: format!("new TCP socket (no loopback connection possible here: {e})"),
            })
        }
    }
}

/// A loopback connection made by a child process placed in `cgroup`: the sock_ops program runs
/// for sockets of processes in the cgroup, and a whole process (not a thread) must move there.
/// The child is forked and only makes system calls (no allocation), which is safe in a
/// multi-threaded parent. The accepting side stays in bbrscope's cgroup, for contrast.
pub fn in_cgroup(cgroup: &Path) -> Result<(Probe, Probe)> {
    let procs = CString::new(cgroup.join("cgroup.procs").as_os_str().as_encoded_bytes())?;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("listening on loopback for verification")?;
    let addr = match listener.local_addr()? {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => bail!("loopback listener is not IPv4"),
    };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() },
        sin_zero: [0; 8],
    };
    let mut pipe = [0i32; 2];
    // SAFETY: pipe2 fills the two-element array it is given.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe");
    }
    // SAFETY: both descriptors were just created and are owned here alone.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    // SAFETY: the child runs only `child_probe` (system calls, no allocation or locks, which
    // another thread of the parent could have held at the fork) and then _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        // Child: join the cgroup, connect, report the algorithm (or a status byte), exit.
        // SAFETY: see the fork above; _exit skips the parent's atexit handlers and destructors.
        unsafe { libc::_exit(child_probe(&procs, &sin, wr.as_raw_fd())) };
    }
    drop(wr);
    // The child's exit closes the pipe, so this returns whatever happens to it; its connection,
    // if made, waits in the listen queue.
    let mut out = Vec::new();
    let read = std::fs::File::from(rd).read_to_end(&mut out);
    let mut status = 0;
    // SAFETY: waits for the child forked above, writing its status to a local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    read.context("reading the child's result")?;
    let code = libc::WEXITSTATUS(status);
    if code != 0 {
        bail!("the verification process could not {}", CHILD_STEPS.get(code as usize).unwrap_or(&"run"));
    }
    let (server, _) = listener.accept().context("accepting the verification connection")?;
    let inside = Probe {
        algorithm: String::from_utf8_lossy(&out).trim_end_matches('\0').to_string(),
        how: format!("new TCP connection from a process in {} to {addr}", cgroup.display()),
    };
    let outside = Probe {
        algorithm: congestion_of(server.as_raw_fd())?,
        how: "its accepting side, in bbrscope's own cgroup".into(),
    };
    Ok((inside, outside))
}

const CHILD_STEPS: &[&str] = &["run", "join the cgroup", "create a socket", "connect", "read TCP_CONGESTION"];

fn child_probe(procs: &CString, sin: &libc::sockaddr_in, out: i32) -> i32 {
    // SAFETY: system calls on pointers to the caller's live data and a local buffer, with their
    // lengths; no allocation (this runs in a forked child).
    unsafe {
        let f = libc::open(procs.as_ptr(), libc::O_WRONLY);
        if f < 0 || libc::write(f, b"0".as_ptr().cast(), 1) != 1 {
            return 1;
        }
        libc::close(f);
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if s < 0 {
            return 2;
        }
        if libc::connect(s, (sin as *const libc::sockaddr_in).cast(), size_of::<libc::sockaddr_in>() as u32) != 0 {
            return 3;
        }
        let mut buf = [0u8; NAME_MAX];
        let mut len = NAME_MAX as libc::socklen_t;
        if libc::getsockopt(s, libc::IPPROTO_TCP, TCP_CONGESTION, buf.as_mut_ptr().cast(), &mut len) != 0 {
            return 4;
        }
        libc::write(out, buf.as_ptr().cast(), len as usize);
        libc::close(s);
    }
    0
}
