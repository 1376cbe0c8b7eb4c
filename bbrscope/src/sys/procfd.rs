//! Which process holds a socket, read from the file descriptors in /proc as `ss -p` does: each
//! `/proc/PID/fd/N` of a socket links to `socket:[INODE]`, and sock_diag reports the same inode
//! for each connection. Socket inodes are numbered on one pseudo-filesystem for the whole host,
//! so the answer does not depend on the network namespace.

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::Path,
    time::{Duration, Instant},
};

use crate::sys::name::Name;

/// A process holding a socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) pid: u32,
    pub(crate) comm: Name,
}

/// The process holding each of `inodes` (those no process holds are absent), from one pass over
/// every process's descriptors: called at start-up, not per flow.
pub(crate) fn holders(inodes: &[u64]) -> HashMap<u64, Holder> {
    if inodes.is_empty() {
        return HashMap::new();
    }
    let mut r = Resolver::default();
    r.learn(all_pids());
    inodes.iter().filter_map(|i| Some((*i, r.known.get(i)?.clone()))).collect()
}

/// Socket inodes to their holders, for flows whose process the kernel could not name: what the
/// passes over /proc found, kept, with new passes at a bounded rate. When several processes
/// hold one (a forked child inherits its parent's descriptors) the one started last is taken: a
/// pre-fork server's master opens the listener, and the worker that accepted a connection is
/// younger than the master.
#[derive(Default)]
pub(crate) struct Resolver {
    known: HashMap<u64, Holder>,
    /// Processes found holding sockets asked about (a server's workers), searched in the quick
    /// pass with those started since the last listing of /proc.
    hot: Vec<u32>,
    /// The processes of the last listing of /proc.
    listed: HashSet<u32>,
    next_quick: Option<Instant>,
    next_full: Option<Instant>,
    /// Names of processes the kernel named by pid alone (where sock_ops programs may ask for the
    /// pid but not the name: 6.12 in the kernel matrix), each read from /proc at most once per
    /// [`COMM_TTL`]: a server's flows come from a few workers, and a /proc read per flow (a few
    /// µs) is a tenth of a core at tens of thousands of flows a second.
    comms: HashMap<u32, (Option<Name>, Instant)>,
}

/// How long a process's name read from /proc is taken as its name: a renamed process
/// (`prctl(PR_SET_NAME)`, exec) or a reused pid is named right within this.
const COMM_TTL: Duration = Duration::from_secs(1);
/// Names cached at most (entries past their time are dropped first, then all).
const COMMS_MAX: usize = 4096;

/// Processes searched in the quick pass besides new ones, at most.
const HOT_MAX: usize = 64;
/// A pass may take at most 1/DUTY of the time until the next of its kind (a 10 ms pass over a
/// busy server's descriptors waits 100 ms before the next): at most 10% of a core for quick
/// passes and 5% for full ones, however many flows ask.
const QUICK_DUTY: u32 = 10;
const QUICK_EVERY: Duration = Duration::from_millis(10);
const FULL_DUTY: u32 = 20;
const FULL_EVERY: Duration = Duration::from_millis(250);

impl Resolver {
    /// Who holds socket `ino`, if it is known or a pass allowed now finds it: first the quick
    /// one (the processes that held the last sockets found, and those started since /proc was
    /// last listed: a worker forked for the connection), then every process.
    pub(crate) fn holder(&mut self, ino: u64) -> Option<Holder> {
        if let Some(h) = self.known.get(&ino) {
            return Some(h.clone());
        }
        let now = Instant::now();
        if self.next_quick.is_none_or(|t| now >= t) {
            let t0 = Instant::now();
            let pids = all_pids();
            let fresh: Vec<u32> =
                pids.iter().copied().filter(|p| !self.listed.contains(p) || self.hot.contains(p)).collect();
            self.listed = pids.into_iter().collect();
            self.learn(fresh);
            self.next_quick = Some(now + (t0.elapsed() * QUICK_DUTY).max(QUICK_EVERY));
        }
        if !self.known.contains_key(&ino) && self.next_full.is_none_or(|t| now >= t) {
            // What a full pass finds is all there is: sockets closed since are forgotten, so
            // memory follows the host's open sockets and a reused inode number (32-bit, they
            // wrap) never names a holder of the socket that had it before.
            self.known.clear();
            let t0 = Instant::now();
            let pids = all_pids();
            self.listed = pids.iter().copied().collect();
            self.learn(pids);
            self.next_full = Some(now + (t0.elapsed() * FULL_DUTY).max(FULL_EVERY));
        }
        let h = self.known.get(&ino)?.clone();
        if !self.hot.contains(&h.pid) {
            if self.hot.len() == HOT_MAX {
                self.hot.remove(0);
            }
            self.hot.push(h.pid);
        }
        Some(h)
    }

    /// The name of process `pid` (see [`Resolver::comms`]).
    pub(crate) fn comm(&mut self, pid: u32) -> Option<Name> {
        self.comm_at(pid, Instant::now())
    }

    fn comm_at(&mut self, pid: u32, now: Instant) -> Option<Name> {
        if let Some((name, read)) = self.comms.get(&pid)
            && now.saturating_duration_since(*read) < COMM_TTL
        {
            return *name;
        }
        if self.comms.len() >= COMMS_MAX {
            self.comms.retain(|_, (_, read)| now.saturating_duration_since(*read) < COMM_TTL);
            if self.comms.len() >= COMMS_MAX {
                self.comms.clear();
            }
        }
        let name = comm(pid);
        self.comms.insert(pid, (name, now));
        name
    }

    /// Reads the descriptors of `pids` and remembers every socket's holder.
    fn learn(&mut self, pids: impl IntoIterator<Item = u32>) {
        let mut found: HashMap<u64, (u64, u32)> = HashMap::new();
        for pid in pids {
            // A process that exits meanwhile simply has no descriptors left to read.
            let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
            let mut started = None;
            for fd in fds.flatten() {
                let Some(ino) = fs::read_link(fd.path()).ok().and_then(|l| socket_inode(&l)) else { continue };
                let start = *started.get_or_insert_with(|| start_time(pid).unwrap_or(0));
                let slot = found.entry(ino).or_insert((start, pid));
                if start > slot.0 {
                    *slot = (start, pid);
                }
            }
        }
        let mut comms: HashMap<u32, Option<Name>> = HashMap::new();
        for (ino, (_, pid)) in found {
            let comm = *comms.entry(pid).or_insert_with(|| comm(pid));
            if let Some(comm) = comm {
                self.known.insert(ino, Holder { pid, comm });
            }
        }
    }
}

/// Every process's pid.
fn all_pids() -> Vec<u32> {
    let Ok(procs) = fs::read_dir("/proc") else { return Vec::new() };
    procs.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// A process's name (`/proc/PID/comm`), as the kernel's `comm` is.
pub(crate) fn comm(pid: u32) -> Option<Name> {
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(Name::new(comm.trim_end_matches('\n')))
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

    /// A socket opened after the resolver's last pass is found by the next one it allows; one
    /// no process holds is not, and asking again at once does not search again.
    #[test]
    fn the_resolver_finds_new_sockets_at_a_bounded_rate() {
        let ino_of = |s: &std::net::UdpSocket| {
            let fd = std::os::fd::AsRawFd::as_raw_fd(s);
            fs::metadata(format!("/proc/self/fd/{fd}")).unwrap().ino()
        };
        let mut r = Resolver::default();
        let first = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(r.holder(ino_of(&first)).map(|h| h.pid), Some(std::process::id()));
        assert_eq!(r.hot, [std::process::id()], "the holder is searched in the quick pass from now on");
        let second = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while r.holder(ino_of(&second)).is_none() {
            assert!(Instant::now() < deadline, "not found within 2 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(r.holder(u64::MAX).is_none());
        let (quick, full) = (r.next_quick, r.next_full);
        assert!(r.holder(u64::MAX).is_none());
        assert_eq!((r.next_quick, r.next_full), (quick, full), "no pass right after one");
    }

    /// A process's name is read once per COMM_TTL: asked again within it, the name read is
    /// given even after the process is gone (so /proc was not read); after it, /proc is read
    /// again and says the process is gone.
    #[test]
    fn process_names_are_read_once_a_second() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        // The child's name is the forking thread's until its exec has set it (seen: this test's
        // thread name, read the moment spawn returned, in one run of a busy suite).
        let deadline = Instant::now() + Duration::from_secs(5);
        while comm(pid).is_some_and(|n| n != "sleep") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut r = Resolver::default();
        let t0 = Instant::now();
        assert_eq!(r.comm_at(pid, t0).map(|n| n.to_string()).as_deref(), Some("sleep"));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(comm(pid).is_none(), "gone from /proc");
        assert_eq!(r.comm_at(pid, t0 + COMM_TTL / 2).map(|n| n.to_string()).as_deref(), Some("sleep"));
        assert_eq!(r.comm_at(pid, t0 + COMM_TTL).map(|n| n.to_string()), None);
        // Bounded: a full cache drops what is past its time, then everything.
        for p in 0..COMMS_MAX as u32 {
            r.comms.insert(u32::MAX - p, (None, t0));
        }
        r.comm_at(std::process::id(), t0 + COMM_TTL * 2);
        assert!(r.comms.len() <= 2, "{} names kept", r.comms.len());
    }
}
