//! Types shared by bbrscope's kernel programs and its userspace.
//!
//! The kernel side never interprets socket fields by name: userspace resolves every offset from
//! the running kernel's BTF and hands the programs a [`Config`] before they are loaded. The
//! programs copy what the config asks for into ring-buffer records laid out below, and userspace
//! decodes them with the same knowledge it used to build the config.
#![no_std]

#[cfg(any(feature = "sockopt", feature = "worker"))]
extern crate std;

#[cfg(feature = "sockopt")]
pub mod sockopt;
#[cfg(feature = "worker")]
pub mod worker;

/// Socket fields copied generically into every [`Sample`] (see [`FieldSpec`]).
pub const MAX_FIELDS: usize = 40;
/// `TCP_CA_NAME_MAX` in the kernel.
pub const CC_NAME_LEN: usize = 16;
/// Bytes copied from `icsk_ca_priv` (the congestion-control module's private state; 104 bytes on
/// every kernel since 5.x). Userspace decodes BBR's and CUBIC's state from it using their BTF.
pub const CA_PRIV_LEN: usize = 104;

/// Bytes of the socket a sample can copy in one read: the programs read the [`Span`] holding
/// every field a sample needs into a per-CPU buffer of this size, then take each field out of
/// it. `struct tcp_sock` is about 2.3 KB on every kernel from 5.10 to 7.3 and the fields lie
/// within 1.8 KB of each other there; userspace refuses to start if a kernel spreads them wider.
pub const SPAN_BUF: usize = 4096;

/// The contiguous bytes of the socket (from the socket pointer) that hold every field a sample
/// copies: the [`FieldSpec`]s, `ca_ops`, `ca_state`, `bytes_acked`, `ca_priv` and `sk_socket` of
/// [`SockLayout`]. `off` is a multiple of 8, `len` at most [`SPAN_BUF`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub off: u32,
    pub len: u32,
}

/// One socket field to copy: `len` bytes (1..=8) at byte offset `off` from the socket pointer,
/// zero-extended into a `u64` slot. `len == 0` means the running kernel lacks the field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldSpec {
    pub off: u32,
    pub len: u32,
}

/// A bitfield (or plain integer) the programs need for their own logic.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BitField {
    /// Byte offset of the first byte holding the field.
    pub off: u32,
    pub shift: u8,
    pub bits: u8,
    pub _pad: [u8; 2],
}

/// Offsets the programs need to decide what to emit (all relative to `struct sock *`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SockLayout {
    pub family: u32,
    /// Local port, host byte order (`skc_num`).
    pub num: u32,
    /// Remote port, network byte order (`skc_dport`).
    pub dport: u32,
    pub daddr: u32,
    pub rcv_saddr: u32,
    pub v6_daddr: u32,
    pub v6_rcv_saddr: u32,
    /// `icsk_ca_ops` (pointer) and the `name` member of `struct tcp_congestion_ops`.
    pub ca_ops: u32,
    pub ca_ops_name: u32,
    pub ca_priv: u32,
    pub ca_state: BitField,
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    pub bytes_acked: u32,
    pub total_retrans: u32,
    /// Socket -> cgroup chain for the cgroup filter; `cgroup == u32::MAX` when the kernel's
    /// `sock_cgroup_data` has no cgroup pointer (before 5.15).
    pub cgroup: u32,
    pub cgroup_level: u32,
    /// `cgroup.ancestors[]` (pointers, 6.2+) or `cgroup.ancestor_ids[]` (u64 ids, older).
    pub cgroup_ancestors: u32,
    pub cgroup_kn: u32,
    pub kernfs_id: u32,
    /// `sk_cookie` (atomic64): the socket cookie, the flow id on the sock_ops path (`ss -e` shows
    /// it as `sk:`).
    pub cookie: u32,
    /// `sk_err`: why an aborted connection ended (ECONNRESET, ETIMEDOUT, ...).
    pub sk_err: u32,
    /// `skc_net` (pointer to `struct net`) and `net.ns.inum`: the network namespace's inode.
    pub net: u32,
    pub net_inum: u32,
    /// `sk_flags`: its bit 0 (`SOCK_DEAD`) is set once the application closed the socket.
    pub sk_flags: u32,
    /// `sk_lock.owned`: non-zero while a process holds the socket's lock, so a callback that
    /// sees it runs in that process's context.
    pub sk_lock_owned: u32,
    /// `tcp_sock.prior_cwnd`: the window when the kernel last began to reduce it for a loss.
    pub prior_cwnd: u32,
    /// `sk_socket` (pointer to the `struct socket` a process's file refers to; null once closed)
    /// and the socket's inode number behind it (`socket_alloc.vfs_inode.i_ino`, from the
    /// `struct socket`, which `socket_alloc` begins with).
    pub sk_socket: u32,
    pub socket_ino: u32,
    /// `socket.flags` (`SOCK_NOSPACE` and its neighbours), read through `sk_socket` with every
    /// sample.
    pub socket_flags: u32,
    pub _pad: u32,
}

/// Optional in-kernel filters; each applies only when its bit is set in `flags`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Filter {
    pub flags: u32,
    /// Matches either end's port (host byte order).
    pub port: u16,
    pub _pad: u16,
    /// Matches either end's address: `(addr & mask) == net`, IPv4 as IPv4-mapped IPv6.
    pub net: [u8; 16],
    pub mask: [u8; 16],
    pub cgroup_id: u64,
    pub cgroup_level: u32,
    pub _pad2: u32,
    pub cc: [u8; CC_NAME_LEN],
}

pub mod filter_flags {
    pub const PORT: u32 = 1 << 0;
    pub const ADDR: u32 = 1 << 1;
    pub const CGROUP: u32 = 1 << 2;
    pub const CC: u32 = 1 << 3;
}

pub mod config_flags {
    /// Also sample flows that only receive data (tcp_probe fires on receivers too).
    pub const RECEIVERS: u32 = 1 << 0;
    /// No `tcp_cong_state_set` tracepoint: detect state changes on each tcp_probe instead.
    pub const POLL_CA_STATE: u32 = 1 << 1;
    /// `tcp_retransmit_skb` carries an `err` argument (kernels from 2025 on) and also fires for
    /// failed attempts, which are not wire retransmits.
    pub const RETRANS_HAS_ERR: u32 = 1 << 2;
    /// `cgroup.ancestors[]` holds pointers (6.2+) rather than ids.
    pub const CGROUP_ANCESTOR_PTRS: u32 = 1 << 3;
    /// What this kernel lets sock_ops programs call (probed at start-up; the read-only config
    /// makes the verifier drop the calls a kernel lacks as dead code): the current process's
    /// ids, its command name, and the coarse clock.
    pub const SOCKOPS_PID: u32 = 1 << 4;
    pub const SOCKOPS_COMM: u32 = 1 << 5;
    pub const SOCKOPS_COARSE_CLOCK: u32 = 1 << 6;
    /// The sock_ops path paces samples by `jiffies` (bpf_jiffies64, which the verifier turns into
    /// one load on 64-bit JITs), with the sample interval in jiffies in `Config::sockops_period`;
    /// set when this kernel lets sock_ops programs call it and its HZ is known.
    pub const SOCKOPS_JIFFIES: u32 = 1 << 7;
}

/// `bbrscope experiment`: new connections in scope get one of two algorithms at random.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Experiment {
    /// `experiment_flags`.
    pub flags: u32,
    /// Percent of connections in scope given arm B (1-99).
    pub split_pct: u32,
    /// Percent of connections in scope that join the experiment at all (1-100); the others keep
    /// the default algorithm: the limit on the share of traffic an experiment touches.
    pub sample_pct: u32,
    pub _pad2: u32,
    /// The two arms' algorithms (NUL-padded); arm A is index 0.
    pub cc: [[u8; CC_NAME_LEN]; 2],
    /// The two arms' initial congestion windows, segments (0: the route's or the kernel's).
    pub iw: [u32; 2],
    /// Connections in scope: this local port (0: any), this cgroup (id 0: any); the
    /// destination ranges are in the `EXP_DST` map when `experiment_flags::DST` is set.
    pub port: u16,
    pub _pad: u16,
    pub cgroup_level: u32,
    pub cgroup_id: u64,
    /// The client-clustered design's salt (`assign_mode::CLIENT`, [`client_gets_b`]): the run's
    /// `--seed`, so that which clients get B is the seed's and no one else's to predict.
    pub salt: u64,
}

pub mod experiment_flags {
    pub const ON: u32 = 1 << 0;
    /// Only destinations in the `EXP_DST` ranges.
    pub const DST: u32 = 1 << 1;
}

/// Whether the experiment gives new connections an arm now: the one value of the `EXP_ASSIGN`
/// map, which userspace writes while the programs run (`Config::experiment` is read-only data,
/// fixed at load). Zero, the map's initial value, assigns nothing: userspace turns assignment on
/// once everything else is in place, and off when the experiment ends, so that connections
/// opening while the last ones drain keep the status quo.
pub mod assign_mode {
    pub const OFF: u32 = 0;
    /// Each connection in scope draws its arm at random (`Experiment::split_pct`).
    pub const PER_CONNECTION: u32 = 1;
    /// Every connection in scope gets arm A (a switchback's A block: one write of this value
    /// switches the whole host).
    pub const FIXED_A: u32 = 2;
    /// Every connection in scope gets arm B (a switchback's B block).
    pub const FIXED_B: u32 = 3;
    /// Every connection of one client address gets the same arm: B when the client's salted
    /// hash says so ([`super::client_gets_b`]), the client-clustered design.
    pub const CLIENT: u32 = 4;
}

/// SplitMix64's finaliser: a fixed, well-mixed function of its input, the same on every host, in
/// every version and in the kernel (a few shifts, xors and multiplications: no loop, no table).
/// A switchback's schedule and a client's arm both come from it; neither may change under a
/// recording.
#[inline(always)]
pub const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a (64-bit) of `bytes`: a stable digest of a name or a list that is the same on every
/// machine and in every version (userspace only: a host's salt, a prefix list's fingerprint).
pub const fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0;
    while i < bytes.len() {
        h = (h ^ bytes[i] as u64).wrapping_mul(0x100_0000_01b3);
        i += 1;
    }
    h
}

/// A client address's hash under `salt`: the address as IPv6 (IPv4 as IPv4-mapped, as the
/// kernel programs compare addresses), its two halves folded in turn through [`splitmix64`].
/// Computed by the sock_ops program to give a client its arm and by the analysis to check it
/// did: one function, so the two never disagree.
#[inline(always)]
pub const fn client_hash(addr: &[u8; 16], salt: u64) -> u64 {
    let hi = u64::from_be_bytes([addr[0], addr[1], addr[2], addr[3], addr[4], addr[5], addr[6], addr[7]]);
    let lo = u64::from_be_bytes([addr[8], addr[9], addr[10], addr[11], addr[12], addr[13], addr[14], addr[15]]);
    splitmix64(splitmix64(salt ^ hi) ^ lo)
}

/// Whether the client at `addr` gets arm B in the client-clustered design: its hash's value mod
/// 100 below `split_pct`, so about `split_pct`% of clients do.
#[inline(always)]
pub const fn client_gets_b(addr: &[u8; 16], salt: u64, split_pct: u32) -> bool {
    client_hash(addr, salt) % 100 < split_pct as u64
}

/// Which arms are a connection's status quo: the algorithm the system, route or cgroup gave it,
/// read by the sock_ops program just before it gives the connection its arm, compared with each
/// arm's (an arm that sets the initial window is never the status quo: it changes the
/// connection all the same). The guardrail watches, for each connection, only the arms that
/// moved it (`Owner::status_quo`).
pub mod status_quo {
    /// The kernel read the connection's algorithm (without it, nothing else is known).
    pub const KNOWN: u8 = 1 << 7;
    /// Arm A's algorithm is the one the connection had.
    pub const A: u8 = 1 << 0;
    /// Arm B's algorithm is the one the connection had.
    pub const B: u8 = 1 << 1;
}

/// Client groups the guardrail sent back to their status quo: the `EXP_HOLD` map, an array of
/// u32 that userspace writes while the programs run. A new connection whose handshake RTT falls
/// in a held band, or whose peer is in a held prefix (`EXP_HOLD_DST`, a prefix-list group), gets
/// no arm (it keeps what the system, route or cgroup gives it), whatever the assignment mode. Band 0 is "RTT unknown", band `i` (1..) lies between edges `i - 1` and `i`,
/// as userspace numbers the guardrail's RTT bands.
pub mod hold {
    /// The bit mask of held bands (bit `i`: band `i`); 0, the initial value, holds nothing.
    pub const MASK: u32 = 0;
    /// The bands' edges in µs, ascending, from this index on; unused edges are 0.
    pub const EDGES: u32 = 1;
    /// Edges kept.
    pub const MAX_EDGES: u32 = 4;
    /// Entries in the map.
    pub const ENTRIES: u32 = EDGES + MAX_EDGES;
    /// In the mask: some client prefixes are held too (the `EXP_HOLD_DST` map, a prefix-list
    /// group the guardrail sent back), so the kernel looks a new connection's peer up there.
    pub const PREFIXES: u32 = 1 << 31;
    /// Prefixes `EXP_HOLD_DST` holds: every prefix a `--prefix-list` may have.
    pub const MAX_PREFIXES: u32 = 10_000;
}

/// Everything userspace hands the programs at load time (a read-only global).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub interval_ns: u64,
    pub flags: u32,
    /// Cap on retransmit and congestion-state records per flow and sample interval; beyond it
    /// they are only counted.
    pub events_per_interval: u32,
    /// Records are submitted without waking userspace (which reads the ring on a short timer)
    /// until this many bytes wait in it: one wake-up per batch, not per record.
    pub wake_bytes: u32,
    pub _pad: u32,
    /// The sample interval on the sock_ops path, in the units of the clock that paces its
    /// samples: jiffies with `config_flags::SOCKOPS_JIFFIES`, else nanoseconds.
    pub sockops_period: u64,
    pub filter: Filter,
    pub sock: SockLayout,
    pub fields: [FieldSpec; MAX_FIELDS],
    /// Where the fields of `fields` and `sock` a sample copies lie (one read per sample).
    pub span: Span,
    pub experiment: Experiment,
}

impl Config {
    pub const fn zeroed() -> Self {
        Self {
            interval_ns: 0,
            flags: 0,
            events_per_interval: 0,
            wake_bytes: 0,
            _pad: 0,
            sockops_period: 0,
            filter: Filter {
                flags: 0,
                port: 0,
                _pad: 0,
                net: [0; 16],
                mask: [0; 16],
                cgroup_id: 0,
                cgroup_level: 0,
                _pad2: 0,
                cc: [0; CC_NAME_LEN],
            },
            sock: SockLayout {
                family: 0,
                num: 0,
                dport: 0,
                daddr: 0,
                rcv_saddr: 0,
                v6_daddr: 0,
                v6_rcv_saddr: 0,
                ca_ops: 0,
                ca_ops_name: 0,
                ca_priv: 0,
                ca_state: BitField { off: 0, shift: 0, bits: 0, _pad: [0; 2] },
                snd_cwnd: 0,
                snd_ssthresh: 0,
                bytes_acked: 0,
                total_retrans: 0,
                cgroup: 0,
                cgroup_level: 0,
                cgroup_ancestors: 0,
                cgroup_kn: 0,
                kernfs_id: 0,
                cookie: 0,
                sk_err: 0,
                net: 0,
                net_inum: 0,
                sk_flags: u32::MAX,
                sk_lock_owned: u32::MAX,
                prior_cwnd: u32::MAX,
                sk_socket: u32::MAX,
                socket_ino: u32::MAX,
                socket_flags: u32::MAX,
                _pad: 0,
            },
            fields: [FieldSpec { off: 0, len: 0 }; MAX_FIELDS],
            span: Span { off: 0, len: 0 },
            experiment: Experiment {
                flags: 0,
                split_pct: 0,
                sample_pct: 0,
                _pad2: 0,
                cc: [[0; CC_NAME_LEN]; 2],
                iw: [0; 2],
                port: 0,
                _pad: 0,
                cgroup_level: 0,
                cgroup_id: 0,
                salt: 0,
            },
        }
    }
}

/// Record kinds in the ring buffer (first byte of every record).
pub mod kind {
    /// A periodic per-flow [`super::Sample`].
    pub const SAMPLE: u8 = 1;
    /// The flow's final [`super::Sample`], taken as the socket enters TCP_CLOSE.
    pub const CLOSE: u8 = 2;
    pub const RETRANSMIT: u8 = 3;
    pub const CONG_STATE: u8 = 4;
    /// The flow's first record on the sock_ops path: who owns it ([`super::FlowOpen`]). Sent
    /// lazily, just before the flow's first other record (its first data-carrying sample or
    /// retransmission): a socket that never sends costs no record.
    pub const OPEN: u8 = 5;
    /// sock_ops path: the flow's final sample, its summary and its owner in one record
    /// ([`super::FlowClose`]). The owner part counts only when `FLAG_FIRST` is set (no OPEN was
    /// sent: a flow whose whole life fits in one record).
    pub const END: u8 = 6;
}

/// `RecordHeader::flags`: this is the first record userspace gets for the flow.
pub const FLAG_FIRST: u8 = 1;

/// Common head of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordHeader {
    pub kind: u8,
    pub flags: u8,
    /// `AF_INET` (2) or `AF_INET6` (10).
    pub family: u8,
    pub ca_state: u8,
    /// Local and remote port, host byte order.
    pub sport: u16,
    pub dport: u16,
    /// bbrscope's id for the flow, unique for the life of the loaded programs. Never a kernel
    /// address.
    pub flow_id: u64,
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// The TCP state (`TCP_ESTABLISHED` = 1 ... as in `enum tcp_state`), 0 where not known (the
    /// tracepoint path's samples).
    pub tcp_state: u8,
    pub _pad: [u8; 7],
    /// Local and remote address; IPv4 in the first four bytes.
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub hdr: RecordHeader,
    pub cc: [u8; CC_NAME_LEN],
    /// tcp_probe events (incoming segments) since the previous sample of this flow.
    pub acks: u32,
    /// Segments retransmitted since the previous sample whose retransmit records were suppressed
    /// by the per-interval cap (they still count in `total_retrans`).
    pub retrans_coalesced: u32,
    /// The low bits of the socket's `struct socket` flags (`SOCK_NOSPACE` is bit 2), valid when
    /// `socket_flags_read` is 1: the application still has the socket (`sk_socket` set) and
    /// this kernel's BTF names the member.
    pub socket_flags: u32,
    pub socket_flags_read: u32,
    pub vals: [u64; MAX_FIELDS],
    pub ca_priv: [u8; CA_PRIV_LEN],
}

/// Who owns a flow (sock_ops path): the OPEN record.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FlowOpen {
    pub hdr: RecordHeader,
    pub owner: Owner,
}

/// Who owns a flow and how it started, as the sock_ops program recorded it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    pub cc: [u8; CC_NAME_LEN],
    /// The process that called connect() (exact) or listen() on the accepting socket (best effort:
    /// only if it listened after bbrscope started); `comm[0] == 0` when unknown.
    pub comm: [u8; 16],
    pub tgid: u32,
    pub pid: u32,
    /// cgroup v2 id of the socket's cgroup (its kernfs inode), 0 if the kernel does not record it.
    pub cgroup_id: u64,
    /// Inode of the socket's network namespace.
    pub netns: u32,
    /// 1: connect() (active open), 0: accepted.
    pub active: u8,
    /// `bbrscope experiment`: 1 or 2 for arm A or B, 0 when not in the experiment.
    pub arm: u8,
    /// `bbrscope experiment`: which arms, if either, are what the connection had before its arm
    /// was given ([`status_quo`]); 0 when not known.
    pub status_quo: u8,
    pub _pad: u8,
    /// When connect() was called or the listener cloned the socket (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// `total_retrans` when the flow was established (SYN/SYN-ACK retransmits).
    pub retrans_at_open: u32,
    /// Where the kernel could not name the process (`tgid` 0): the socket's inode, which
    /// userspace looks up in /proc as `ss -p` does; 0 when not read or already closed.
    pub sock_ino: u32,
}

/// A flow's last record on the sock_ops path (`kind::END`): its final sample (whose header is
/// this record's), what the kernel accumulated over its life, and its owner.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FlowClose {
    pub sample: Sample,
    pub end: FlowEnd,
    pub owner: Owner,
}

/// What the kernel accumulated over a flow's life.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FlowEnd {
    /// RTT callbacks (the kernel makes one per round trip) over the flow's life.
    pub rtt_events: u64,
    /// The TCP state the socket left for TCP_CLOSE, and `sk_err` then: together they tell how it
    /// ended (FIN, reset sent or received, timeout, refused).
    pub old_state: u8,
    /// 1 when this side reset the connection on data that arrived after the application closed
    /// it (the kernel's TcpExtTCPAbortOnData): `sk_err` says ECONNRESET as for a reset received.
    pub aborted_on_data: u8,
    pub _pad: [u8; 2],
    pub sk_err: i32,
    /// Smoothed RTT: first, lowest and highest seen (µs, from every RTT callback).
    pub srtt_first_us: u32,
    pub srtt_min_us: u32,
    pub srtt_max_us: u32,
    pub cwnd_max: u32,
    /// Retransmit records sent, and retransmitted segments only counted (per-interval cap).
    pub retrans_records: u32,
    pub retrans_coalesced: u32,
    pub samples: u32,
    /// Retransmitted segments the kernel counted in `total_retrans` whose transmission failed
    /// on this host (the device or qdisc refused them): never on the wire.
    pub retrans_failed: u32,
    /// ACKs the kernel took its slow path for (SACK blocks, window changes, out of order), each
    /// a callback of the sock_ops program.
    pub slow_path_acks: u32,
    /// Send-path callbacks: packets built while the flow's srtt was longer
    /// than the sample interval.
    pub send_events: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Retransmit {
    pub hdr: RecordHeader,
    /// Segments retransmitted since the previous record (growth of `total_retrans`).
    pub segs: u32,
    pub total_retrans: u32,
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CongState {
    pub hdr: RecordHeader,
    pub old: u8,
    pub new: u8,
    pub _pad: [u8; 6],
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
}

/// Indices into the per-CPU `COUNTERS` array.
pub mod counter {
    /// Per-ACK events: tcp_probe runs (incoming segments on any TCP socket; tracepoint path) or
    /// RTT callbacks of observed flows (sock_ops path, added up at each sample).
    pub const PROBE_EVENTS: u32 = 0;
    pub const SAMPLES: u32 = 1;
    pub const RETRANSMITS: u32 = 2;
    pub const CONG_STATES: u32 = 3;
    pub const CLOSES: u32 = 4;
    /// Records lost: the ring buffer was full (or, never seen, every per-CPU buffer a sample is
    /// read into was in use by programs this one interrupted).
    pub const RING_FULL: u32 = 5;
    /// Retransmit records folded into the next sample by the per-interval cap.
    pub const RETRANS_COALESCED: u32 = 6;
    /// Flows first seen by the programs (passing filters or not).
    pub const FLOWS_SEEN: u32 = 7;
    /// Flows rejected by an in-kernel filter.
    pub const FLOWS_FILTERED: u32 = 8;
    /// Per-flow state that could not be stored (map update failed).
    pub const STATE_FULL: u32 = 9;
    /// Congestion-state records suppressed by the per-interval cap, or polled changes before the
    /// flow's first record (its first sample carries the state).
    pub const CONG_COALESCED: u32 = 10;
    /// Per-flow state removed because the socket closed (or was reused): with FLOWS_SEEN this
    /// tells how full the table is, and so how many flows the LRU must have evicted.
    pub const FLOWS_FORGOTTEN: u32 = 11;
    /// sock_ops path: flows opened (OPEN records) and summaries sent (END records).
    pub const OPENS: u32 = 12;
    pub const ENDS: u32 = 13;
    /// sock_ops path: socket storage could not be allocated (the flow is not observed).
    pub const STORAGE_FAILED: u32 = 14;
    /// sock_ops path: congestion-state changes of sockets bbrscope does not track (no cookie) or
    /// that have not sent data.
    pub const CONG_UNTRACKED: u32 = 15;
    /// `bbrscope experiment`: connections in scope whose algorithm could not be set (they stay
    /// on the default and out of the experiment).
    pub const ARM_FAILED: u32 = 16;
    /// sock_ops path: flows that closed without ever sending data (receive-only or idle
    /// sockets): no record at all (`--receivers` keeps them).
    pub const FLOWS_QUIET: u32 = 17;
    pub const COUNT: u32 = 18;
}

#[cfg(feature = "user")]
mod pod {
    use super::{Config, FieldSpec};
    // SAFETY: repr(C) structs of integers and arrays of them, with explicit padding fields: every
    // bit pattern is valid and there are no pointers.
    unsafe impl aya::Pod for Config {}
    // SAFETY: as above.
    unsafe impl aya::Pod for FieldSpec {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash is SplitMix64's, pinned: a recording made today must find the same clients on
    /// B tomorrow. Values from the reference (Vigna's splitmix64.c, its finaliser on x).
    #[test]
    fn the_hash_is_pinned() {
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2];
        assert_eq!(client_hash(&v4, 7), splitmix64(splitmix64(7) ^ 0xffff_7f00_0002));
        // Another salt, another address: other values.
        assert_ne!(client_hash(&v4, 7), client_hash(&v4, 8));
        let mut other = v4;
        other[15] = 3;
        assert_ne!(client_hash(&v4, 7), client_hash(&other, 7));
    }

    /// About `split_pct`% of clients get B, for any salt; 0 and 100 give none and all.
    #[test]
    fn the_split_holds_over_clients() {
        for salt in [0, 1, 0xdead_beef] {
            let b = (0..10_000u32)
                .filter(|i| {
                    let mut a = [0u8; 16];
                    a[10] = 0xff;
                    a[11] = 0xff;
                    a[12..].copy_from_slice(&(0x0a00_0000 + i).to_be_bytes());
                    client_gets_b(&a, salt, 30)
                })
                .count();
            assert!((2_800..3_200).contains(&b), "salt {salt}: {b} of 10,000 on B");
        }
        let a = [1u8; 16];
        assert!(!client_gets_b(&a, 5, 0) && client_gets_b(&a, 5, 100));
    }
}
