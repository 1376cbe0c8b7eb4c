//! Decoding ring-buffer records into typed events, in the units `ss -tin` uses: packets for
//! windows, bits per second for rates, microseconds for RTTs.

use std::{
    borrow::Cow,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use bbrscope_common::{
    CA_PRIV_LEN, CongState, FLAG_FIRST, FlowClose, FlowOpen, MAX_FIELDS, RecordHeader, Retransmit, Sample, kind,
    status_quo,
};
use serde::{Deserialize, Serialize};

use crate::observe::kernel::layout::{Field, Layout};
pub(crate) use crate::sys::name::Name;

/// `TCP_INFINITE_SSTHRESH`: ssthresh before the first loss.
const INFINITE_SSTHRESH: u64 = 0x7fff_ffff;
/// BBR keeps bandwidth in packets per microsecond scaled by 2^24 (`BW_SCALE`).
const BBR_BW_SCALE: u32 = 24;
/// BBR gains are fixed point with 1.0 = 256 (`BBR_UNIT`).
const BBR_UNIT: f64 = 256.0;

/// The TCP congestion state machine (`enum tcp_ca_state`, uapi linux/tcp.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaState {
    Open,
    Disorder,
    Cwr,
    Recovery,
    Loss,
    Unknown,
}

impl CaState {
    pub(crate) fn from_raw(v: u8) -> Self {
        match v {
            0 => CaState::Open,
            1 => CaState::Disorder,
            2 => CaState::Cwr,
            3 => CaState::Recovery,
            4 => CaState::Loss,
            _ => CaState::Unknown,
        }
    }

    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            CaState::Open => "open",
            CaState::Disorder => "disorder",
            CaState::Cwr => "cwr",
            CaState::Recovery => "recovery",
            CaState::Loss => "loss",
            CaState::Unknown => "unknown",
        }
    }
}

/// `SOCK_NOSPACE` in `struct socket`'s flags (include/linux/net.h: bit 2 since Linux 2.6; the
/// kernel matrix checks it on every kernel it boots: a writer blocked on a full buffer has it).
const SOCK_NOSPACE: u32 = 1 << 2;

/// `sk_userlocks` bits (include/net/sock.h, unchanged since 2.2; not in BTF, being macros): the
/// application set SO_SNDBUF or SO_RCVBUF, and the kernel no longer sizes that buffer itself.
const SOCK_SNDBUF_LOCK: u64 = 1;
const SOCK_RCVBUF_LOCK: u64 = 2;

/// What every flow record carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Head {
    /// bbrscope's flow id (`cookie` in JSON).
    pub(crate) flow: u64,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    pub(crate) ca_state: CaState,
    /// The first record of this flow bbrscope has received.
    pub(crate) first: bool,
    /// The TCP state (`enum tcp_state`), 0 where the record does not carry it.
    pub(crate) tcp_state: u8,
}

/// `enum tcp_state` as `ss` names the states (None for 0: not known).
pub(crate) fn tcp_state_name(v: u8) -> Option<&'static str> {
    Some(match v {
        1 => "established",
        2 => "syn_sent",
        3 => "syn_recv",
        4 => "fin_wait1",
        5 => "fin_wait2",
        6 => "time_wait",
        7 => "close",
        8 => "close_wait",
        9 => "last_ack",
        10 => "listen",
        11 => "closing",
        _ => return None,
    })
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Bbr {
    /// Shared with the layout's mode names: a sample, and each copy of it, costs no allocation.
    pub(crate) mode: Option<Arc<str>>,
    pub(crate) bw_bps: Option<u64>,
    pub(crate) min_rtt_us: Option<u32>,
    pub(crate) pacing_gain: Option<f64>,
    pub(crate) cwnd_gain: Option<f64>,
    pub(crate) full_bw_reached: Option<bool>,
    pub(crate) cycle_idx: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Cubic {
    /// W_max: cwnd (packets) before the last reduction.
    pub(crate) w_max: Option<u32>,
}

/// The flow's state read from its socket. `None` where this kernel lacks the field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub(crate) cwnd: Option<u32>,
    /// `None` until the first loss ("infinite" in the kernel).
    pub(crate) ssthresh: Option<u32>,
    pub(crate) srtt_us: Option<u32>,
    pub(crate) rttvar_us: Option<u32>,
    pub(crate) min_rtt_us: Option<u32>,
    pub(crate) pacing_rate_bps: Option<u64>,
    pub(crate) delivery_rate_bps: Option<u64>,
    pub(crate) delivery_app_limited: Option<bool>,
    pub bytes_acked: Option<u64>,
    pub(crate) bytes_sent: Option<u64>,
    pub(crate) bytes_retrans: Option<u64>,
    pub(crate) bytes_received: Option<u64>,
    pub(crate) retrans_total: Option<u32>,
    pub(crate) data_segs_out: Option<u32>,
    /// Segments sent and received, all and with data (`segs_out`/`segs_in`/`data_segs_in` in ss).
    pub(crate) segs_out: Option<u32>,
    pub(crate) segs_in: Option<u32>,
    pub(crate) data_segs_in: Option<u32>,
    /// Packets sent and not yet cumulatively acked (`unacked` in ss).
    pub(crate) unacked: Option<u32>,
    /// Packets believed in the network (`tcp_packets_in_flight`).
    pub(crate) in_flight: Option<u32>,
    pub(crate) lost: Option<u32>,
    pub(crate) sacked: Option<u32>,
    pub(crate) retrans_out: Option<u32>,
    pub(crate) delivered: Option<u32>,
    pub(crate) mss: Option<u32>,
    /// The peer's advertised receive window, bytes.
    pub(crate) snd_wnd: Option<u32>,
    /// Time with data outstanding (tcp_info's `busy_time`), and the parts of it the peer's
    /// receive window or this host's send buffer held the sender back (`rwnd_limited`,
    /// `sndbuf_limited`), µs: the kernel's chrono counters up to the stretch in progress.
    pub(crate) busy_us: Option<u64>,
    pub(crate) rwnd_limited_us: Option<u64>,
    pub(crate) sndbuf_limited_us: Option<u64>,
    /// The send buffer's size and the bytes queued in it, sent or not (`ss -m`'s `tb` and `w`:
    /// `sk_sndbuf`, `sk_wmem_queued`, both counting each packet's overhead), and the bytes the
    /// application wrote that are not sent yet (`notsent` in ss, `tcpi_notsent_bytes`).
    pub(crate) sndbuf_bytes: Option<u32>,
    pub(crate) wmem_queued_bytes: Option<u32>,
    pub(crate) notsent_bytes: Option<u32>,
    /// The receive side: the receive buffer (`ss -m`'s `rb`, `sk_rcvbuf`); the most the
    /// application read in one of the receiver's round trips (`rcv_space` in ss and tcp_info:
    /// what the kernel sizes the buffer from); the receiver's RTT estimate (`rcv_rtt`, 0 until
    /// data arrived); the window the receiver may grow its advertisement to now (`rcv_ssthresh`)
    /// and the largest it may ever advertise (`window_clamp`, set by the buffer).
    pub(crate) rcvbuf_bytes: Option<u32>,
    pub(crate) rcv_space_bytes: Option<u32>,
    pub(crate) rcv_rtt_us: Option<u32>,
    pub(crate) rcv_ssthresh_bytes: Option<u32>,
    pub(crate) window_clamp_bytes: Option<u32>,
    /// The writer waits for space in the send buffer: the socket's `SOCK_NOSPACE`, set when a
    /// write found the buffer full (blocking, or told so by poll) and cleared once ACKs free a
    /// third of it. `None` once the application closed the socket, or where it cannot be read.
    pub(crate) nospace: Option<bool>,
    /// The application set the send (receive) buffer's size itself, SO_SNDBUF (SO_RCVBUF): the
    /// kernel keeps it at that, whatever tcp_wmem (tcp_rmem) allows. From `sk_userlocks`.
    pub(crate) sndbuf_locked: Option<bool>,
    pub(crate) rcvbuf_locked: Option<bool>,
    pub(crate) bbr: Option<Bbr>,
    pub(crate) cubic: Option<Cubic>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SampleEvent {
    pub head: Head,
    /// The final sample, as the socket closes.
    pub closing: bool,
    pub(crate) cc: Name,
    /// Incoming segments since the previous sample.
    pub(crate) acks: u32,
    /// Retransmitted segments whose events were folded into this sample by the per-interval cap.
    pub(crate) retrans_coalesced: u32,
    pub(crate) metrics: Metrics,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RetransmitEvent {
    pub(crate) head: Head,
    pub(crate) segs: u32,
    pub(crate) retrans_total: u32,
    pub(crate) cwnd: u32,
    pub(crate) ssthresh: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CongStateEvent {
    pub(crate) head: Head,
    pub(crate) from: CaState,
    pub(crate) to: CaState,
    pub(crate) cwnd: u32,
    pub(crate) ssthresh: Option<u32>,
}

/// Who owns a flow (sock_ops path). See docs/stream.md for which parts are exact.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Owner {
    /// "connect" (active open) or "accept".
    pub(crate) side: Option<&'static str>,
    /// The process that called connect(), or listen() on the accepting socket.
    pub(crate) pid: Option<u32>,
    pub(crate) comm: Option<Name>,
    /// cgroup v2 id (the cgroup directory's inode number).
    pub(crate) cgroup_id: Option<u64>,
    /// Inode of the network namespace (`ls -L -i /proc/PID/ns/net`, `lsns -t net`).
    pub(crate) netns: Option<u32>,
    /// `bbrscope experiment`: the arm (1 = A, 2 = B) the kernel assigned the flow to.
    pub(crate) arm: Option<u8>,
    /// `bbrscope experiment`: whether arms A and B are what the connection had before it got its
    /// arm (`bbrscope_common::status_quo`); `None` when the kernel did not read it.
    pub(crate) status_quo: Option<[bool; 2]>,
    /// Where the kernel could not name the process: the socket's inode, for a lookup in /proc
    /// (see [`crate::sys::procfd`]). Never shown.
    pub(crate) sock_ino: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OpenEvent {
    pub(crate) head: Head,
    pub(crate) cc: Name,
    pub(crate) owner: Owner,
    /// When connect() was called or the socket was accepted (CLOCK_MONOTONIC ns); 0 for a
    /// connection open before bbrscope started (its start was not seen).
    pub(crate) start_ns: u64,
    /// Retransmits before the flow was established (SYN or SYN-ACK).
    pub(crate) retrans_at_open: u32,
    /// The flow's whole life came in one record, its close (it ended before its first sample
    /// and sent no other record): `stream` shows it as its `flow_summary` alone.
    pub(crate) summary_only: bool,
}

/// How a flow ended, from the TCP state it closed from and the socket's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EndReason {
    /// An orderly close: FIN both ways.
    Fin,
    /// The peer reset the connection.
    ResetReceived,
    /// This side aborted it (close() with unread data, SO_LINGER 0, data arriving after
    /// close()): a reset was sent.
    ResetSent,
    /// Retransmission timeouts gave up (tcp_retries2, or a user timeout).
    Timeout,
    Refused,
    /// Also what replay reads an end it does not know as (a newer writer's), so that the
    /// summary still counts.
    #[serde(other)]
    Other,
}

impl EndReason {
    /// The name the stream uses (as serde writes it).
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            EndReason::Fin => "fin",
            EndReason::ResetReceived => "reset_received",
            EndReason::ResetSent => "reset_sent",
            EndReason::Timeout => "timeout",
            EndReason::Refused => "refused",
            EndReason::Other => "other",
        }
    }
}

const ECONNREFUSED: i32 = 111;
const ECONNRESET: i32 = 104;
const EPIPE: i32 = 32;
const ETIMEDOUT: i32 = 110;
const ENETUNREACH: i32 = 101;
const EHOSTUNREACH: i32 = 113;
const TCP_SYN_SENT: u8 = 2;
/// `enum tcp_state` values a socket leaves for TCP_CLOSE after an orderly shutdown.
const TCP_FIN_WAIT1: u8 = 4;
const TCP_FIN_WAIT2: u8 = 5;
const TCP_TIME_WAIT: u8 = 6;
const TCP_LAST_ACK: u8 = 9;
const TCP_CLOSING: u8 = 11;
const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE_WAIT: u8 = 8;

impl EndReason {
    /// `aborted_on_data`: this side reset the connection on data after its close (the kernel
    /// records ECONNRESET then too).
    pub(crate) fn classify(old_state: u8, sk_err: i32, aborted_on_data: bool) -> Self {
        match sk_err {
            ECONNRESET if aborted_on_data => EndReason::ResetSent,
            ECONNRESET | EPIPE => EndReason::ResetReceived,
            ETIMEDOUT => EndReason::Timeout,
            // Retransmissions that gave up after ICMP (or local) unreachable errors: the kernel
            // reports the last soft error instead of ETIMEDOUT (tcp_write_err) and counts the
            // abort as a timeout (TcpExtTCPAbortOnTimeout). A connect() the ICMP error ended at
            // once (a hard error in SYN_SENT) is no timeout.
            EHOSTUNREACH | ENETUNREACH if old_state != TCP_SYN_SENT => EndReason::Timeout,
            ECONNREFUSED => EndReason::Refused,
            0 => match old_state {
                TCP_FIN_WAIT1 | TCP_FIN_WAIT2 | TCP_TIME_WAIT | TCP_LAST_ACK | TCP_CLOSING => EndReason::Fin,
                TCP_ESTABLISHED | TCP_CLOSE_WAIT => EndReason::ResetSent,
                _ => EndReason::Other,
            },
            _ => EndReason::Other,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EndEvent {
    pub(crate) head: Head,
    pub(crate) start_ns: u64,
    pub(crate) end: EndReason,
    /// RTT callbacks over the flow's life: one per round trip of newly acked data.
    pub(crate) rtt_events: u64,
    /// ACKs the kernel took its slow path for (SACK blocks, window changes, out of order).
    pub(crate) slow_path_acks: u32,
    /// Send-path callbacks, while the flow's srtt was longer than the sample interval.
    pub(crate) send_events: u32,
    pub(crate) srtt_first_us: u32,
    pub(crate) srtt_min_us: u32,
    pub(crate) srtt_max_us: u32,
    pub(crate) cwnd_max: u32,
    pub(crate) retrans_records: u32,
    pub(crate) retrans_coalesced: u32,
    pub(crate) samples: u32,
    pub(crate) retrans_failed: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Sample(Box<SampleEvent>),
    Retransmit(RetransmitEvent),
    CongState(CongStateEvent),
    Open(Box<OpenEvent>),
    End(Box<EndEvent>),
}

impl Event {
    pub(crate) fn head(&self) -> &Head {
        match self {
            Event::Sample(s) => &s.head,
            Event::Retransmit(r) => &r.head,
            Event::CongState(c) => &c.head,
            Event::Open(o) => &o.head,
            Event::End(e) => &e.head,
        }
    }
}

fn ssthresh(raw: u64) -> Option<u32> {
    (raw < INFINITE_SSTHRESH).then_some(raw as u32)
}

fn addr(family: u8, bytes: [u8; 16], port: u16) -> SocketAddr {
    let v6 = Ipv6Addr::from(bytes);
    // IPv4 sockets are stored IPv4-mapped; so are IPv4 peers of dual-stack IPv6 sockets. Both
    // are shown as the IPv4 address people know them by.
    let ip = match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None if family == 2 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        None => IpAddr::V6(v6),
    };
    SocketAddr::new(ip, port)
}

fn head(h: &RecordHeader) -> Head {
    Head {
        flow: h.flow_id,
        ts_ns: h.ts_ns,
        src: addr(h.family, h.saddr, h.sport),
        dst: addr(h.family, h.daddr, h.dport),
        ca_state: CaState::from_raw(h.ca_state),
        first: h.flags & FLAG_FIRST != 0,
        tcp_state: h.tcp_state,
    }
}

/// The record of type `T` at the start of `bytes`: borrowed where it is aligned for `T`, as the
/// ring's records are (the kernel places each at a multiple of 8 bytes), copied otherwise. A
/// summary's record is about 1 KB; copying each one was 3% of `stream`'s time at 5,000 short
/// flows a second.
fn read<T: Copy>(bytes: &[u8]) -> Option<Cow<'_, T>> {
    if bytes.len() < size_of::<T>() {
        return None;
    }
    let p = bytes.as_ptr().cast::<T>();
    Some(if p.is_aligned() {
        // SAFETY: in bounds (the length is checked above) and aligned; the record types are
        // plain old data (integers and byte arrays), valid for any bytes; the borrow lives no
        // longer than `bytes`.
        Cow::Borrowed(unsafe { &*p })
    } else {
        // SAFETY: in bounds; read_unaligned copies the bytes of a plain-old-data record type.
        Cow::Owned(unsafe { p.read_unaligned() })
    })
}

fn open(head: Head, o: &bbrscope_common::Owner, summary_only: bool) -> Box<OpenEvent> {
    let comm = Name::from_kernel(&o.comm);
    Box::new(OpenEvent {
        head,
        cc: Name::from_kernel(&o.cc),
        owner: Owner {
            side: Some(if o.active != 0 { "connect" } else { "accept" }),
            pid: (o.tgid != 0).then_some(o.tgid),
            comm: (!comm.is_empty()).then_some(comm),
            cgroup_id: (o.cgroup_id != 0).then_some(o.cgroup_id),
            netns: (o.netns != 0).then_some(o.netns),
            arm: (o.arm != 0).then_some(o.arm),
            status_quo: (o.arm != 0 && o.status_quo & status_quo::KNOWN != 0)
                .then_some([o.status_quo & status_quo::A != 0, o.status_quo & status_quo::B != 0]),
            sock_ino: (o.sock_ino != 0).then_some(o.sock_ino),
        },
        start_ns: o.start_ns,
        retrans_at_open: o.retrans_at_open,
        summary_only,
    })
}

/// Decodes records using the layout the programs were loaded with.
pub(crate) struct Decoder<'a> {
    pub(crate) layout: &'a Layout,
}

impl Decoder<'_> {
    /// Passes the record's events to `f`: one, or for a flow's close record its OPEN (when it is
    /// the flow's first record), final sample and summary, in that order. `None` for records this
    /// version does not know (or truncated ones).
    pub(crate) fn decode(&self, bytes: &[u8], f: &mut impl FnMut(Event)) -> Option<()> {
        match *bytes.first()? {
            kind::SAMPLE | kind::CLOSE => f(Event::Sample(self.sample(&*read::<Sample>(bytes)?))),
            kind::RETRANSMIT => {
                let r = read::<Retransmit>(bytes)?;
                f(Event::Retransmit(RetransmitEvent {
                    head: head(&r.hdr),
                    segs: r.segs,
                    retrans_total: r.total_retrans,
                    cwnd: r.snd_cwnd,
                    ssthresh: ssthresh(u64::from(r.snd_ssthresh)),
                }));
            }
            kind::CONG_STATE => {
                let c = read::<CongState>(bytes)?;
                f(Event::CongState(CongStateEvent {
                    head: head(&c.hdr),
                    from: CaState::from_raw(c.old),
                    to: CaState::from_raw(c.new),
                    cwnd: c.snd_cwnd,
                    ssthresh: ssthresh(u64::from(c.snd_ssthresh)),
                }));
            }
            kind::OPEN => {
                let o = read::<FlowOpen>(bytes)?;
                f(Event::Open(open(head(&o.hdr), &o.owner, false)));
            }
            kind::END => {
                let c = read::<FlowClose>(bytes)?;
                let mut sample = self.sample(&c.sample);
                if sample.head.first {
                    // No OPEN was sent: this record carries the owner.
                    f(Event::Open(open(sample.head.clone(), &c.owner, true)));
                    sample.head.first = false;
                }
                let e = &c.end;
                let h = sample.head.clone();
                f(Event::Sample(sample));
                f(Event::End(Box::new(EndEvent {
                    head: h,
                    start_ns: c.owner.start_ns,
                    end: EndReason::classify(e.old_state, e.sk_err, e.aborted_on_data != 0),
                    rtt_events: e.rtt_events,
                    slow_path_acks: e.slow_path_acks,
                    send_events: e.send_events,
                    srtt_first_us: e.srtt_first_us,
                    srtt_min_us: e.srtt_min_us,
                    srtt_max_us: e.srtt_max_us,
                    cwnd_max: e.cwnd_max,
                    retrans_records: e.retrans_records,
                    retrans_coalesced: e.retrans_coalesced,
                    samples: e.samples,
                    retrans_failed: e.retrans_failed,
                })));
            }
            _ => return None,
        }
        Some(())
    }

    fn sample(&self, s: &Sample) -> Box<SampleEvent> {
        let cc = Name::from_kernel(&s.cc);
        let mut metrics = self.metrics(&s.vals, &cc, &s.ca_priv, s.hdr.ts_ns);
        metrics.nospace = (s.socket_flags_read != 0).then_some(s.socket_flags & SOCK_NOSPACE != 0);
        Box::new(SampleEvent {
            head: head(&s.hdr),
            closing: s.hdr.kind != kind::SAMPLE,
            cc,
            acks: s.acks,
            retrans_coalesced: s.retrans_coalesced,
            metrics,
        })
    }

    fn metrics(&self, vals: &[u64; MAX_FIELDS], cc: &str, ca_priv: &[u8; CA_PRIV_LEN], ts_ns: u64) -> Metrics {
        let g = |f: Field| self.layout.get(vals, f);
        let g32 = |f: Field| g(f).map(|v| v as u32);
        // The kernel's chrono counters (jiffies), each with the stretch in progress added as
        // tcp_info does (type 1 busy, 2 receive-window-, 3 send-buffer-limited).
        let stretch = match (g(Field::ChronoType), g(Field::ChronoStart), self.layout.jiffies) {
            (Some(t), Some(start), Some(clock)) if t > 0 => {
                Some((t, u64::from(clock.jiffies32_at(ts_ns).wrapping_sub(start as u32))))
            }
            _ => None,
        };
        let jiffies = |f: Field, t: u64| {
            let ongoing = stretch.filter(|&(kind, _)| kind == t).map_or(0, |(_, j)| j);
            Some(g(f)?.saturating_add(ongoing).saturating_mul(self.layout.jiffy_us?))
        };
        let mss = g32(Field::MssCache);
        let delivery_rate_bps = match (g(Field::RateDelivered), g(Field::RateIntervalUs), mss) {
            // In 128 bits: a record torn by a concurrent writer must not overflow (debug builds
            // panic on it), whatever its fields say.
            (Some(d), Some(i), Some(mss)) if i > 0 => {
                Some((u128::from(d) * u128::from(mss) * 8_000_000 / u128::from(i)).min(u64::MAX.into()) as u64)
            }
            (Some(_), Some(_), Some(_)) => Some(0),
            _ => None,
        };
        let (unacked, sacked, lost, retrans_out) =
            (g32(Field::PacketsOut), g32(Field::SackedOut), g32(Field::LostOut), g32(Field::RetransOut));
        let in_flight = match (unacked, sacked, lost, retrans_out) {
            (Some(p), Some(s), Some(l), Some(r)) => Some(p.saturating_sub(s.saturating_add(l)).saturating_add(r)),
            _ => None,
        };
        Metrics {
            cwnd: g32(Field::SndCwnd),
            ssthresh: g(Field::SndSsthresh).and_then(ssthresh),
            srtt_us: g32(Field::SrttUs).map(|v| v >> 3),
            rttvar_us: g32(Field::MdevUs).map(|v| v >> 2),
            min_rtt_us: g32(Field::MinRttUs).filter(|&v| v != u32::MAX),
            // ~0 means "no pacing limit".
            pacing_rate_bps: g(Field::PacingRate)
                .filter(|&v| v != u64::MAX && v != u64::from(u32::MAX))
                .map(|v| v.saturating_mul(8)),
            delivery_rate_bps,
            delivery_app_limited: g(Field::RateAppLimited).map(|v| v != 0),
            bytes_acked: g(Field::BytesAcked),
            bytes_sent: g(Field::BytesSent),
            bytes_retrans: g(Field::BytesRetrans),
            bytes_received: g(Field::BytesReceived),
            retrans_total: g32(Field::TotalRetrans),
            data_segs_out: g32(Field::DataSegsOut),
            segs_out: g32(Field::SegsOut),
            segs_in: g32(Field::SegsIn),
            data_segs_in: g32(Field::DataSegsIn),
            unacked,
            in_flight,
            lost,
            sacked,
            retrans_out,
            delivered: g32(Field::Delivered),
            mss,
            snd_wnd: g32(Field::SndWnd),
            // tcp_info's busy time is all three: the kernel counts each stretch in one of them.
            busy_us: [Field::ChronoBusy, Field::ChronoRwndLimited, Field::ChronoSndbufLimited]
                .into_iter()
                .zip(1..)
                .map(|(f, t)| jiffies(f, t))
                .sum::<Option<u64>>(),
            rwnd_limited_us: jiffies(Field::ChronoRwndLimited, 2),
            sndbuf_limited_us: jiffies(Field::ChronoSndbufLimited, 3),
            sndbuf_bytes: g32(Field::SkSndbuf),
            wmem_queued_bytes: g32(Field::SkWmemQueued),
            notsent_bytes: match (g32(Field::WriteSeq), g32(Field::SndNxt)) {
                (Some(w), Some(n)) => Some(w.wrapping_sub(n)).filter(|&b| i32::try_from(b).is_ok()),
                _ => None,
            },
            rcvbuf_bytes: g32(Field::SkRcvbuf),
            rcv_space_bytes: g32(Field::RcvSpace),
            rcv_rtt_us: g32(Field::RcvRtt).map(|v| v >> 3),
            rcv_ssthresh_bytes: g32(Field::RcvSsthresh),
            window_clamp_bytes: g32(Field::WindowClamp),
            // Read beside the fields, by the sample (see `sample`).
            nospace: None,
            sndbuf_locked: g(Field::SkUserlocks).map(|l| l & SOCK_SNDBUF_LOCK != 0),
            rcvbuf_locked: g(Field::SkUserlocks).map(|l| l & SOCK_RCVBUF_LOCK != 0),
            bbr: (cc == "bbr").then(|| self.bbr(ca_priv, mss)).flatten(),
            cubic: (cc == "cubic").then(|| self.cubic(ca_priv)).flatten(),
        }
    }

    fn bbr(&self, ca_priv: &[u8; CA_PRIV_LEN], mss: Option<u32>) -> Option<Bbr> {
        let l = self.layout.bbr.as_ref()?;
        let r = |f: &Option<crate::observe::kernel::layout::PrivField>| f.as_ref().and_then(|f| f.read(ca_priv));
        let mode = r(&l.mode).map(|m| {
            l.mode_names
                .iter()
                .find(|(v, _)| *v == m as i64)
                .map_or_else(|| format!("mode_{m}").into(), |(_, n)| n.clone())
        });
        let bw_bps = match (r(&l.bw), mss) {
            (Some(bw), Some(mss)) => Some(((u128::from(bw) * u128::from(mss) * 8_000_000) >> BBR_BW_SCALE) as u64),
            _ => None,
        };
        Some(Bbr {
            mode,
            bw_bps,
            min_rtt_us: r(&l.min_rtt_us).map(|v| v as u32),
            // Zero is no gain BBR uses: it has not run on an ACK yet (the first RTT sample of a
            // flow comes just before BBR's first update).
            pacing_gain: r(&l.pacing_gain).filter(|&v| v != 0).map(|v| v as f64 / BBR_UNIT),
            cwnd_gain: r(&l.cwnd_gain).filter(|&v| v != 0).map(|v| v as f64 / BBR_UNIT),
            full_bw_reached: r(&l.full_bw_reached).map(|v| v != 0),
            cycle_idx: r(&l.cycle_idx).map(|v| v as u32),
        })
    }

    fn cubic(&self, ca_priv: &[u8; CA_PRIV_LEN]) -> Option<Cubic> {
        let l = self.layout.cubic.as_ref()?;
        Some(Cubic { w_max: l.last_max_cwnd.and_then(|f| f.read(ca_priv)).map(|v| v as u32) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::kernel::layout::Field;

    /// An end a newer writer knows and this one does not reads as `other`: the summary still
    /// counts in a replay or an experiment's analysis.
    #[test]
    fn an_unknown_end_reads_as_other() {
        assert_eq!(serde_json::from_str::<EndReason>("\"reset_by_a_middlebox\"").unwrap(), EndReason::Other);
        assert_eq!(serde_json::from_str::<EndReason>("\"timeout\"").unwrap(), EndReason::Timeout);
    }

    #[test]
    fn addresses_show_ipv4_for_mapped() {
        let mut b = [0u8; 16];
        b[10] = 0xff;
        b[11] = 0xff;
        b[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(addr(2, b, 80).to_string(), "127.0.0.1:80");
        assert_eq!(addr(10, b, 80).to_string(), "127.0.0.1:80");
        let v6: [u8; 16] = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(addr(10, v6, 443).to_string(), "[2001:db8::1]:443");
    }

    /// A SAMPLE record as the kernel program lays it out, for a bbr flow, with the raw kernel
    /// values given; decoded with this kernel's own layout (from its BTF).
    fn bbr_record(layout: &Layout, srtt_raw: u64, bw_raw: u64, pacing_gain_raw: u64, mss: u64) -> Vec<u8> {
        // SAFETY: Sample is plain old data (integers and byte arrays); all-zero is a valid value.
        let mut s: Sample = unsafe { std::mem::zeroed() };
        s.hdr.kind = kind::SAMPLE;
        s.hdr.family = 2;
        s.cc[..3].copy_from_slice(b"bbr");
        s.vals[Field::SrttUs as usize] = srtt_raw;
        s.vals[Field::MssCache as usize] = mss;
        let bbr = layout.bbr.as_ref().expect("BBR's BTF");
        let put = |priv_: &mut [u8; CA_PRIV_LEN], f: &crate::observe::kernel::layout::PrivField, v: u64| {
            for bit in 0..f.bits {
                let at = f.bit_offset + bit;
                if v >> bit & 1 == 1 {
                    priv_[(at / 8) as usize] |= 1 << (at % 8);
                }
            }
        };
        put(&mut s.ca_priv, bbr.bw.as_ref().unwrap(), bw_raw);
        put(&mut s.ca_priv, bbr.pacing_gain.as_ref().unwrap(), pacing_gain_raw);
        put(&mut s.ca_priv, bbr.cwnd_gain.as_ref().unwrap(), 512);
        // SAFETY: reading the bytes of a plain-old-data value.
        unsafe { std::slice::from_raw_parts((&raw const s).cast::<u8>(), size_of::<Sample>()) }.to_vec()
    }

    fn decode_one(layout: &Layout, rec: &[u8]) -> Option<Event> {
        let mut out = None;
        (Decoder { layout }).decode(rec, &mut |ev| out = Some(ev))?;
        out
    }

    #[test]
    fn decodes_the_kernels_fixed_point_units() {
        let btf = crate::observe::kernel::btf::Btf::kernel().expect("kernel BTF (run on a kernel with BTF)");
        let layout = Layout::from_btf(&btf).unwrap();
        // srtt_us is kept << 3; BBR's bw is packets per µs << 24 (BW_SCALE); gains are << 8.
        // 1 packet/µs of 1448 bytes = 11.584 Gbit/s; 0x140 = 1.25.
        let rec = bbr_record(&layout, 8 * 1000, 1 << 24, 0x140, 1448);
        let Some(Event::Sample(s)) = decode_one(&layout, &rec) else { panic!("not a sample") };
        assert_eq!(s.metrics.srtt_us, Some(1000));
        let b = s.metrics.bbr.unwrap();
        assert_eq!(b.bw_bps, Some(11_584_000_000));
        assert_eq!(b.pacing_gain, Some(1.25));
        assert_eq!(b.cwnd_gain, Some(2.0));
        // A quarter packet per µs at 1500-byte segments: 375 bytes/µs = 3 Gbit/s.
        let rec = bbr_record(&layout, 8 * 37, 1 << 22, 0xc0, 1500);
        let Some(Event::Sample(s)) = decode_one(&layout, &rec) else { panic!("not a sample") };
        assert_eq!(s.metrics.srtt_us, Some(37));
        assert_eq!(s.metrics.bbr.as_ref().unwrap().bw_bps, Some(3_000_000_000));
        assert_eq!(s.metrics.bbr.unwrap().pacing_gain, Some(0.75));
    }

    /// A record is read in place where it is aligned (the ring's are) and copied where it is
    /// not: both read the same, and a record cut short reads as nothing.
    #[test]
    fn records_read_alike_aligned_or_not() {
        let btf = crate::observe::kernel::btf::Btf::kernel().expect("kernel BTF (run on a kernel with BTF)");
        let layout = Layout::from_btf(&btf).unwrap();
        let rec = bbr_record(&layout, 8 * 1000, 1 << 24, 0x140, 1448);
        // u64s keep the copy 8-byte aligned; one byte in, it is not.
        let mut words = vec![0u64; rec.len() / 8 + 2];
        // SAFETY: the bytes of a Vec<u64> it owns, whole, viewed as bytes (valid for any).
        let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) };
        bytes[..rec.len()].copy_from_slice(&rec);
        assert!(matches!(read::<Sample>(&bytes[..rec.len()]), Some(Cow::Borrowed(_))));
        let aligned = format!("{:?}", decode_one(&layout, &bytes[..rec.len()]).unwrap());
        bytes.copy_within(..rec.len(), 1);
        assert!(matches!(read::<Sample>(&bytes[1..=rec.len()]), Some(Cow::Owned(_))));
        assert_eq!(format!("{:?}", decode_one(&layout, &bytes[1..=rec.len()]).unwrap()), aligned);
        assert!(decode_one(&layout, &bytes[1..rec.len()]).is_none());
    }

    /// A record whose every field is all ones (torn, or a kernel gone wrong) decodes without
    /// an arithmetic overflow: debug builds would panic in the middle of a stream.
    #[test]
    fn a_record_of_extreme_values_decodes_without_overflow() {
        let btf = crate::observe::kernel::btf::Btf::kernel().expect("kernel BTF (run on a kernel with BTF)");
        let layout = Layout::from_btf(&btf).unwrap();
        let rec = bbr_record(&layout, u64::MAX, u64::MAX, u64::MAX, u64::MAX);
        // SAFETY: `rec` holds the bytes of one Sample (plain old data), written by `bbr_record`;
        // read unaligned, as a Vec<u8> promises no more.
        let mut s: Sample = unsafe { std::ptr::read_unaligned(rec.as_ptr().cast()) };
        s.vals = [u64::MAX; MAX_FIELDS];
        // SAFETY: reading the bytes of a plain-old-data value.
        let rec = unsafe { std::slice::from_raw_parts((&raw const s).cast::<u8>(), size_of::<Sample>()) }.to_vec();
        let ev = decode_one(&layout, &rec).expect("decoded");
        let Event::Sample(s) = &ev else { panic!("not a sample") };
        assert!(s.metrics.delivery_rate_bps.is_some());
        // And what the flow table and the sinks compute from it.
        let mut table = crate::observe::flow::FlowTable::new(0);
        table.apply(&ev);
        let flow = table.get(s.head.flow).expect("the flow");
        let _ = (flow.mean_goodput_bps(), flow.rtt_inflation(), flow.duration_ns());
    }

    /// A flow's close record: with `FLAG_FIRST` (no OPEN was sent) it opens the flow with the
    /// owner it carries, then gives the final sample and the summary; without, only those two.
    #[test]
    fn a_close_record_is_the_final_sample_the_summary_and_when_first_the_opening() {
        let btf = crate::observe::kernel::btf::Btf::kernel().expect("kernel BTF (run on a kernel with BTF)");
        let layout = Layout::from_btf(&btf).unwrap();
        // SAFETY: FlowClose is plain old data (integers and byte arrays); all-zero is a valid value.
        let mut c: FlowClose = unsafe { std::mem::zeroed() };
        c.sample.hdr.kind = kind::END;
        c.sample.hdr.flags = FLAG_FIRST;
        c.sample.hdr.family = 2;
        c.sample.hdr.flow_id = 77;
        c.sample.hdr.ts_ns = 5_000;
        c.sample.hdr.tcp_state = 7;
        c.sample.cc[..5].copy_from_slice(b"cubic");
        c.sample.vals[Field::SrttUs as usize] = 8 * 250;
        c.end.old_state = TCP_LAST_ACK;
        c.end.srtt_max_us = 300;
        c.end.samples = 1;
        c.owner.comm[..5].copy_from_slice(b"nginx");
        c.owner.tgid = 42;
        c.owner.netns = 4026531840;
        c.owner.start_ns = 1_000;
        c.owner.arm = 2;
        // SAFETY: reading the bytes of a plain-old-data value.
        let bytes = unsafe { std::slice::from_raw_parts((&raw const c).cast::<u8>(), size_of::<FlowClose>()) };
        let decode = |b: &[u8]| {
            let mut evs = Vec::new();
            (Decoder { layout: &layout }).decode(b, &mut |ev| evs.push(ev)).unwrap();
            evs
        };
        let evs = decode(bytes);
        let [Event::Open(o), Event::Sample(s), Event::End(e)] = &evs[..] else { panic!("{evs:?}") };
        assert!(o.head.first && !s.head.first && !e.head.first);
        assert!(o.summary_only, "the flow's only record");
        assert_eq!((o.head.flow, s.head.flow, e.head.flow), (77, 77, 77));
        assert_eq!(o.owner.comm.as_deref(), Some("nginx"));
        assert_eq!((o.owner.pid, o.owner.netns, o.owner.arm), (Some(42), Some(4026531840), Some(2)));
        assert_eq!(o.start_ns, 1_000);
        assert!(s.closing);
        assert_eq!(s.metrics.srtt_us, Some(250));
        assert_eq!(e.end, EndReason::Fin);
        assert_eq!((e.start_ns, e.srtt_max_us, e.samples), (1_000, 300, 1));
        // Not the flow's first record: its OPEN came before.
        let mut later = bytes.to_vec();
        later[1] = 0;
        let evs = decode(&later);
        let [Event::Sample(s), Event::End(_)] = &evs[..] else { panic!("{evs:?}") };
        assert!(s.closing && !s.head.first);
        // A truncated record is refused whole.
        assert!((Decoder { layout: &layout }).decode(&bytes[..bytes.len() - 1], &mut |_| panic!()).is_none());
    }

    #[test]
    fn end_reasons() {
        assert_eq!(EndReason::classify(TCP_LAST_ACK, 0, false), EndReason::Fin);
        assert_eq!(EndReason::classify(TCP_FIN_WAIT2, 0, false), EndReason::Fin);
        assert_eq!(EndReason::classify(TCP_ESTABLISHED, ECONNRESET, false), EndReason::ResetReceived);
        assert_eq!(EndReason::classify(TCP_CLOSE_WAIT, EPIPE, false), EndReason::ResetReceived);
        assert_eq!(EndReason::classify(TCP_ESTABLISHED, 0, false), EndReason::ResetSent);
        assert_eq!(EndReason::classify(TCP_ESTABLISHED, ETIMEDOUT, false), EndReason::Timeout);
        assert_eq!(EndReason::classify(2, ECONNREFUSED, false), EndReason::Refused);
        assert_eq!(EndReason::classify(TCP_ESTABLISHED, EHOSTUNREACH, false), EndReason::Timeout);
        assert_eq!(EndReason::classify(TCP_FIN_WAIT1, ENETUNREACH, false), EndReason::Timeout);
        assert_eq!(EndReason::classify(TCP_SYN_SENT, EHOSTUNREACH, false), EndReason::Other);
        assert_eq!(EndReason::classify(TCP_FIN_WAIT2, ECONNRESET, true), EndReason::ResetSent);
        assert_eq!(EndReason::classify(TCP_FIN_WAIT1, ECONNRESET, false), EndReason::ResetReceived);
    }

    #[test]
    fn infinite_ssthresh_is_none() {
        assert_eq!(ssthresh(0x7fff_ffff), None);
        assert_eq!(ssthresh(42), Some(42));
    }
}
