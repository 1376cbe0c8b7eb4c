//! Which process holds a socket, read from the file descriptors in /proc as `ss -p` does: each
//! `/proc/PID/fd/N` of a socket links to `socket:[INODE]`, and sock_diag reports the same inode
//! for each connection. Socket inodes are numbered on one pseudo-filesystem for the whole host,
//! so the answer does not depend on the network namespace.

use std::{collections::HashMap, fs, path::Path};

use crate::observe::name::Name;

/// A process holding a socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub comm: Name,
}

/// The process holding each of `inodes` (those no process holds are absent). When several hold
/// one (a forked child inherits its parent's descriptors), the one started last is taken: a
/// pre-fork server's master opens the listener, and the worker that accepted a connection is
/// younger than the master.
///
/// Costs one readlink per open descriptor of the host: called at start-up, not per flow.
pub fn holders(inodes: &[u64]) -> HashMap<u64, Holder> {
    let mut found: HashMap<u64, (u64, u32)> = HashMap::new();
    if inodes.is_empty() {
        return HashMap::new();
    }
    let wanted: std::collections::HashSet<u64> = inodes.iter().copied().collect();
    let Ok(procs) = fs::read_dir("/proc") else { return HashMap::new() };
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        // A process that exits meanwhile simply has no descriptors left to read.
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else { continue };
        let mut started = None;
        for fd in fds.flatten() {
            let Some(ino) = fs::read_link(fd.path()).ok().and_then(|l| socket_inode(&l)) else { continue };
            if !wanted.contains(&ino) {
                continue;
            }
            let start = *started.get_or_insert_with(|| start_time(pid).unwrap_or(0));
            let slot = found.entry(ino).or_insert((start, pid));
            if start > slot.0 {
                *slot = (start, pid);
            }
        }
    }
    found
        .into_iter()
        .filter_map(|(ino, (_, pid))| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            Some((ino, Holder { pid, comm: Name::new(comm.trim_end_matches('\n')) }))
        })
        .collect()
}

/// The inode in a descriptor's link text, `socket:[12345]`.
fn socket_inode(link: &Path) -> Option<u64> {
    link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// When the process started, in clock ticks since boot (`/proc/PID/stat` field 22), counted
/// after the command name, which may itself hold spaces and parentheses.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    #[test]
    fn reads_socket_links() {
        assert_eq!(socket_inode(Path::new("socket:[4026532]")), Some(4_026_532));
        assert_eq!(socket_inode(Path::new("pipe:[4026532]")), None);
        assert_eq!(socket_inode(Path::new("/dev/null")), None);
    }

    /// This process's own socket is found, with its pid and name.
    #[test]
    fn finds_the_process_holding_a_socket() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
        let ino = fs::metadata(format!("/proc/self/fd/{fd}")).unwrap().ino();
        let found = holders(&[ino, u64::MAX]);
        let me = fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(found.get(&ino), Some(&Holder { pid: std::process::id(), comm: Name::new(me.trim_end()) }));
        assert!(!found.contains_key(&u64::MAX));
        assert!(start_time(std::process::id()).is_some_and(|t| t > 0));
    }
}
