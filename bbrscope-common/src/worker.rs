//! A pre-fork server's worker, for the tests and the kernel matrix: a child process of its own
//! name that accepts one connection on a listener its parent opened, the way nginx's and
//! Apache's workers do. bbrscope must name such a flow's owner after the worker, not the
//! listener's process; the tests check it against the pid this returns.

use std::{ffi::CStr, io, net::TcpListener, os::fd::AsRawFd};

/// What the worker does: waits `wait_ms`, accepts one connection, reads until `request` bytes
/// came (at least one read), then writes `chunks` x 20,000 bytes `pause_ms` apart, or until the
/// client goes, and closes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Work {
    pub wait_ms: i64,
    pub request: usize,
    pub chunks: usize,
    pub pause_ms: i64,
}

/// Forks the worker named `name` (its `comm`); returns its pid. The caller reaps it.
pub fn fork(listener: &TcpListener, name: &CStr, w: Work) -> io::Result<libc::pid_t> {
    let fd = listener.as_raw_fd();
    // SAFETY: fork in a threaded process: the child calls only async-signal-safe functions
    // (prctl, nanosleep, accept, read, send, close, _exit) on its own stack and on memory made
    // before the fork (`name`, `w`).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: as above; every pointer is to a live local of the size given.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr());
            let ms = |ms: i64| libc::timespec { tv_sec: ms / 1000, tv_nsec: ms % 1000 * 1_000_000 };
            let wait = ms(w.wait_ms);
            libc::nanosleep(&raw const wait, core::ptr::null_mut());
            let conn = libc::accept(fd, core::ptr::null_mut(), core::ptr::null_mut());
            let mut buf = [0u8; 16384];
            let mut got = 0;
            loop {
                let n = libc::read(conn, buf.as_mut_ptr().cast(), buf.len());
                if n <= 0 {
                    break;
                }
                got += n as usize;
                if got >= w.request {
                    break;
                }
            }
            let response = [0x5au8; 20_000];
            let pause = ms(w.pause_ms);
            'chunks: for _ in 0..w.chunks {
                let mut off = 0;
                while off < response.len() {
                    // MSG_NOSIGNAL: a client that went is an error here, not a SIGPIPE.
                    let n = libc::send(conn, response[off..].as_ptr().cast(), response.len() - off, libc::MSG_NOSIGNAL);
                    if n <= 0 {
                        break 'chunks;
                    }
                    off += n as usize;
                }
                libc::nanosleep(&raw const pause, core::ptr::null_mut());
            }
            libc::close(conn);
            libc::_exit(0);
        }
    }
    Ok(pid)
}
