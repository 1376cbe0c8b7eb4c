//! Turns the running kernel's BTF into the offsets the kernel programs read at, and remembers how
//! to decode what they copy (bitfields, the congestion-control private area).

use std::sync::Arc;

use anyhow::{Result, bail};
use bbrscope_common::{BitField, CA_PRIV_LEN, FieldSpec, MAX_FIELDS, SPAN_BUF, SockLayout, Span, config_flags};

use super::{
    bbr_version,
    btf::{Btf, Location},
};

/// Socket fields copied into every sample. The discriminant is the slot in the sample's `vals`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    SndCwnd,
    SndSsthresh,
    SrttUs,
    MdevUs,
    MinRttUs,
    PacingRate,
    BytesAcked,
    BytesSent,
    BytesRetrans,
    BytesReceived,
    TotalRetrans,
    RetransOut,
    LostOut,
    PacketsOut,
    SackedOut,
    Delivered,
    RateDelivered,
    RateIntervalUs,
    MssCache,
    SndWnd,
    RateAppLimited,
    DataSegsOut,
    SegsOut,
    SegsIn,
    DataSegsIn,
    /// The kernel's own accounting of where a sender's time went (`tcp_chrono`, what
    /// tcp_info's `busy_time`, `rwnd_limited` and `sndbuf_limited` report), in jiffies.
    ChronoBusy,
    ChronoRwndLimited,
    ChronoSndbufLimited,
    /// The stretch in progress: since when (jiffies) and of which kind (`enum tcp_chrono`).
    ChronoStart,
    ChronoType,
    /// The send buffer: its size and what is queued in it (`ss -m`'s `tb` and `w`), and the
    /// sequence numbers that say how much of the queue is not sent yet (`notsent`).
    SkSndbuf,
    SkWmemQueued,
    WriteSeq,
    SndNxt,
    /// The receive side (`ss -m`'s `rb`; tcp_info's `rcv_space`, `rcv_rtt`, `rcv_ssthresh`):
    /// the receive buffer, the most the application read in one of the receiver's round trips
    /// (what autotuning sizes the buffer from), the receiver's RTT estimate (in 1/8 µs), the
    /// window it may grow its advertisement to now, and the largest it may ever advertise.
    SkRcvbuf,
    RcvSpace,
    RcvRtt,
    RcvSsthresh,
    WindowClamp,
    /// What the application fixed with setsockopt (`SOCK_SNDBUF_LOCK`, `SOCK_RCVBUF_LOCK`, ...):
    /// a 4-bit bitfield beside `sk_protocol` until 6.x, a byte since; BTF gives either.
    SkUserlocks,
}

/// Where each [`Field`] lives, as (struct, member path) in BTF. All of these structs start at the
/// socket pointer (`tcp_sock` embeds `inet_connection_sock` embeds ... `sock`).
pub const FIELDS: &[(Field, &str, &str)] = &[
    (Field::SndCwnd, "tcp_sock", "snd_cwnd"),
    (Field::SndSsthresh, "tcp_sock", "snd_ssthresh"),
    (Field::SrttUs, "tcp_sock", "srtt_us"),
    (Field::MdevUs, "tcp_sock", "mdev_us"),
    (Field::MinRttUs, "tcp_sock", "rtt_min.s.v"),
    (Field::PacingRate, "sock", "sk_pacing_rate"),
    (Field::BytesAcked, "tcp_sock", "bytes_acked"),
    (Field::BytesSent, "tcp_sock", "bytes_sent"),
    (Field::BytesRetrans, "tcp_sock", "bytes_retrans"),
    (Field::BytesReceived, "tcp_sock", "bytes_received"),
    (Field::TotalRetrans, "tcp_sock", "total_retrans"),
    (Field::RetransOut, "tcp_sock", "retrans_out"),
    (Field::LostOut, "tcp_sock", "lost_out"),
    (Field::PacketsOut, "tcp_sock", "packets_out"),
    (Field::SackedOut, "tcp_sock", "sacked_out"),
    (Field::Delivered, "tcp_sock", "delivered"),
    (Field::RateDelivered, "tcp_sock", "rate_delivered"),
    (Field::RateIntervalUs, "tcp_sock", "rate_interval_us"),
    (Field::MssCache, "tcp_sock", "mss_cache"),
    (Field::SndWnd, "tcp_sock", "snd_wnd"),
    (Field::RateAppLimited, "tcp_sock", "rate_app_limited"),
    (Field::DataSegsOut, "tcp_sock", "data_segs_out"),
    (Field::SegsOut, "tcp_sock", "segs_out"),
    (Field::SegsIn, "tcp_sock", "segs_in"),
    (Field::DataSegsIn, "tcp_sock", "data_segs_in"),
    // `chrono_stat[i - 1]` accumulates `enum tcp_chrono` value i (TCP_CHRONO_BUSY = 1, ...).
    (Field::ChronoBusy, "tcp_sock", "chrono_stat[0]"),
    (Field::ChronoRwndLimited, "tcp_sock", "chrono_stat[1]"),
    (Field::ChronoSndbufLimited, "tcp_sock", "chrono_stat[2]"),
    (Field::ChronoStart, "tcp_sock", "chrono_start"),
    (Field::ChronoType, "tcp_sock", "chrono_type"),
    (Field::SkSndbuf, "sock", "sk_sndbuf"),
    (Field::SkWmemQueued, "sock", "sk_wmem_queued"),
    (Field::WriteSeq, "tcp_sock", "write_seq"),
    (Field::SndNxt, "tcp_sock", "snd_nxt"),
    (Field::SkRcvbuf, "sock", "sk_rcvbuf"),
    (Field::RcvSpace, "tcp_sock", "rcvq_space.space"),
    (Field::RcvRtt, "tcp_sock", "rcv_rtt_est.rtt_us"),
    (Field::RcvSsthresh, "tcp_sock", "rcv_ssthresh"),
    (Field::WindowClamp, "tcp_sock", "window_clamp"),
    (Field::SkUserlocks, "sock", "sk_userlocks"),
];

/// How to get a value out of the bytes the kernel copied: shift and width in bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extract {
    pub(crate) shift: u32,
    pub(crate) bits: u32,
}

impl Extract {
    pub(crate) fn apply(&self, raw: u64) -> u64 {
        let v = raw >> self.shift;
        if self.bits >= 64 { v } else { v & ((1u64 << self.bits) - 1) }
    }
}

/// Reads `bits` bits at `bit_offset` from `bytes`, little-endian as the kernel lays out
/// bitfields on little-endian machines. Fields wider than 56 bits must be byte-aligned.
pub(crate) fn bits_at(bytes: &[u8], bit_offset: u32, bits: u32) -> Option<u64> {
    let start = (bit_offset / 8) as usize;
    let shift = bit_offset % 8;
    let len = (shift + bits).div_ceil(8) as usize;
    if len > 8 {
        return None;
    }
    let b = bytes.get(start..start + len)?;
    let mut word = [0u8; 8];
    word[..len].copy_from_slice(b);
    Some(Extract { shift, bits }.apply(u64::from_le_bytes(word)))
}

/// A member of a congestion-control module's private state (inside `icsk_ca_priv`).
#[derive(Clone, Copy, Debug)]
pub struct PrivField {
    pub(crate) bit_offset: u32,
    pub(crate) bits: u32,
}

impl PrivField {
    pub(crate) fn read(&self, ca_priv: &[u8; CA_PRIV_LEN]) -> Option<u64> {
        bits_at(ca_priv, self.bit_offset, self.bits)
    }
}

/// BBR's private state (`struct bbr` in net/ipv4/tcp_bbr.c), where the kernel has BTF for it.
#[derive(Clone, Debug)]
pub struct BbrLayout {
    pub(crate) min_rtt_us: Option<PrivField>,
    /// `bw` is a windowed max filter; its current value is `s[0].v`.
    pub bw: Option<PrivField>,
    pub mode: Option<PrivField>,
    pub pacing_gain: Option<PrivField>,
    pub(crate) cwnd_gain: Option<PrivField>,
    pub(crate) full_bw_reached: Option<PrivField>,
    pub(crate) cycle_idx: Option<PrivField>,
    /// Enumerator names of `enum bbr_mode`, by value.
    pub mode_names: Vec<(i64, Arc<str>)>,
    /// Which BBR this layout is ([`bbr_version::classify`]).
    pub(crate) version: Option<bbr_version::Version>,
}

/// CUBIC's private state (`struct bictcp`): the window before the last reduction (W_max).
#[derive(Clone, Debug)]
pub(crate) struct CubicLayout {
    pub(crate) last_max_cwnd: Option<PrivField>,
}

#[derive(Clone, Debug)]
pub struct Layout {
    pub sock: SockLayout,
    pub fields: [FieldSpec; MAX_FIELDS],
    /// The socket bytes holding every field a sample copies, read in one piece.
    pub(crate) span: Span,
    extracts: [Option<Extract>; MAX_FIELDS],
    /// `config_flags` bits the layout implies.
    pub(crate) flags: u32,
    /// The kernel can attribute sockets to cgroups (`sock_cgroup_data.cgroup`, 5.15+).
    pub cgroup_filter: bool,
    pub bbr: Option<BbrLayout>,
    pub(crate) cubic: Option<CubicLayout>,
    /// Sampled fields this kernel does not have (reported as null).
    pub missing: Vec<String>,
    /// Microseconds per jiffy (`USEC_PER_SEC / HZ`, as the kernel converts its chrono counters
    /// for tcp_info); `None` where HZ could not be found (the chrono fields are then null).
    pub(crate) jiffy_us: Option<u64>,
    /// The tick counter against the records' clock, for the chrono stretch in progress at a
    /// sample (without it the counters stop at the last completed stretch).
    pub(crate) jiffies: Option<crate::sys::hz::JiffyClock>,
}

fn byte_field(loc: Location) -> Option<(FieldSpec, Extract)> {
    let shift = loc.bit_offset % 8;
    let len = (shift + loc.bits).div_ceil(8);
    (len <= 8).then_some((FieldSpec { off: loc.bit_offset / 8, len }, Extract { shift, bits: loc.bits }))
}

impl Layout {
    pub fn from_btf(btf: &Btf) -> Result<Self> {
        let mut missing_required = Vec::new();
        let mut req = |strukt: &str, path: &str| -> u32 {
            match btf.member(strukt, path) {
                Some(loc) => loc.byte_offset(),
                None => {
                    missing_required.push(format!("{strukt}.{path}"));
                    0
                }
            }
        };
        let mut sock = SockLayout {
            family: req("sock", "__sk_common.skc_family"),
            num: req("sock", "__sk_common.skc_num"),
            dport: req("sock", "__sk_common.skc_dport"),
            daddr: req("sock", "__sk_common.skc_daddr"),
            rcv_saddr: req("sock", "__sk_common.skc_rcv_saddr"),
            v6_daddr: req("sock", "__sk_common.skc_v6_daddr"),
            v6_rcv_saddr: req("sock", "__sk_common.skc_v6_rcv_saddr"),
            ca_ops: req("inet_connection_sock", "icsk_ca_ops"),
            ca_ops_name: req("tcp_congestion_ops", "name"),
            ca_priv: req("inet_connection_sock", "icsk_ca_priv"),
            snd_cwnd: req("tcp_sock", "snd_cwnd"),
            snd_ssthresh: req("tcp_sock", "snd_ssthresh"),
            bytes_acked: req("tcp_sock", "bytes_acked"),
            total_retrans: req("tcp_sock", "total_retrans"),
            ..Default::default()
        };
        match btf.member("inet_connection_sock", "icsk_ca_state") {
            Some(loc) => {
                sock.ca_state = BitField {
                    off: loc.byte_offset(),
                    shift: (loc.bit_offset % 8) as u8,
                    bits: loc.bits as u8,
                    _pad: [0; 2],
                }
            }
            None => missing_required.push("inet_connection_sock.icsk_ca_state".into()),
        }
        if !missing_required.is_empty() {
            bail!("kernel BTF lacks socket members bbrscope needs: {}", missing_required.join(", "));
        }

        // Optional: what the sock_ops path reports about a flow's owner and end. `u32::MAX` tells
        // the programs a kernel lacks one.
        let opt = |strukt: &str, path: &str| btf.member(strukt, path).map_or(u32::MAX, |l| l.byte_offset());
        sock.cookie = opt("sock", "__sk_common.skc_cookie");
        sock.sk_err = opt("sock", "sk_err");
        sock.sk_flags = opt("sock", "__sk_common.skc_flags");
        sock.sk_lock_owned = opt("sock", "sk_lock.owned");
        sock.prior_cwnd = opt("tcp_sock", "prior_cwnd");
        sock.net = opt("sock", "__sk_common.skc_net.net");
        sock.net_inum = opt("net", "ns.inum");
        sock.sk_socket = opt("sock", "sk_socket");
        sock.socket_ino = opt("socket_alloc", "vfs_inode.i_ino");
        sock.socket_flags = opt("socket", "flags");

        let mut flags = 0;
        let cgroup_filter = Self::cgroup_chain(btf, &mut sock, &mut flags);

        let mut fields = [FieldSpec::default(); MAX_FIELDS];
        let mut extracts = [None; MAX_FIELDS];
        let mut missing = Vec::new();
        for (i, &(field, strukt, path)) in FIELDS.iter().enumerate() {
            debug_assert_eq!(field as usize, i);
            match btf.member(strukt, path).and_then(byte_field) {
                Some((spec, ex)) => {
                    fields[i] = spec;
                    extracts[i] = Some(ex);
                }
                None => missing.push(format!("{strukt}.{path}")),
            }
        }

        Ok(Layout {
            span: sample_span(&sock, &fields)?,
            sock,
            fields,
            extracts,
            flags,
            cgroup_filter,
            bbr: Self::bbr(btf),
            cubic: Self::cubic(btf),
            missing,
            jiffy_us: crate::sys::hz::discover_once().map(|h| 1_000_000 / u64::from(h.hz)),
            jiffies: crate::sys::hz::jiffy_clock(),
        })
    }

    /// socket -> `sk_cgrp_data.cgroup` -> `ancestors[level]` -> `kn` -> `id`; ancestors became
    /// pointers in 6.2 (ids before), and sockets only carry a cgroup pointer since 5.15.
    fn cgroup_chain(btf: &Btf, sock: &mut SockLayout, flags: &mut u32) -> bool {
        let off = |s: &str, p: &str| btf.member(s, p).map(|l| l.byte_offset());
        let (Some(cgroup), Some(level), Some(kn), Some(id)) =
            (off("sock", "sk_cgrp_data.cgroup"), off("cgroup", "level"), off("cgroup", "kn"), off("kernfs_node", "id"))
        else {
            sock.cgroup = u32::MAX;
            return false;
        };
        sock.cgroup = cgroup;
        sock.cgroup_level = level;
        sock.cgroup_kn = kn;
        sock.kernfs_id = id;
        if let Some(a) = off("cgroup", "ancestors") {
            sock.cgroup_ancestors = a;
            *flags |= config_flags::CGROUP_ANCESTOR_PTRS;
        } else if let Some(a) = off("cgroup", "ancestor_ids") {
            sock.cgroup_ancestors = a;
        } else {
            sock.cgroup = u32::MAX;
            return false;
        }
        true
    }

    fn bbr(btf: &Btf) -> Option<BbrLayout> {
        btf.struct_id("bbr")?;
        let f = |path: &str| btf.member("bbr", path).map(|l| PrivField { bit_offset: l.bit_offset, bits: l.bits });
        let mode_names = btf
            .enum_values("bbr_mode")
            .map(|vals| vals.iter().map(|(n, v)| (*v, n.trim_start_matches("BBR_").to_lowercase().into())).collect())
            .unwrap_or_default();
        Some(BbrLayout {
            min_rtt_us: f("min_rtt_us"),
            bw: f("bw.s.v"),
            mode: f("mode"),
            pacing_gain: f("pacing_gain"),
            cwnd_gain: f("cwnd_gain"),
            full_bw_reached: f("full_bw_reached"),
            cycle_idx: f("cycle_idx"),
            mode_names,
            version: bbr_version::classify(btf, "").version,
        })
    }

    fn cubic(btf: &Btf) -> Option<CubicLayout> {
        btf.struct_id("bictcp")?;
        let last_max_cwnd =
            btf.member("bictcp", "last_max_cwnd").map(|l| PrivField { bit_offset: l.bit_offset, bits: l.bits });
        Some(CubicLayout { last_max_cwnd })
    }

    /// The value of `field` in a sample's copied slots; `None` when this kernel lacks it.
    pub(crate) fn get(&self, vals: &[u64; MAX_FIELDS], field: Field) -> Option<u64> {
        let i = field as usize;
        self.extracts[i].map(|ex| ex.apply(vals[i]))
    }
}

/// The one span of the socket a sample reads: every copied field, the congestion-control ops
/// pointer, the congestion state's bytes (read as 4), `bytes_acked`, the private area and the
/// `struct socket` pointer.
fn sample_span(sock: &SockLayout, fields: &[FieldSpec; MAX_FIELDS]) -> Result<Span> {
    let mut own =
        vec![(sock.ca_ops, 8), (sock.ca_state.off, 4), (sock.bytes_acked, 8), (sock.ca_priv, CA_PRIV_LEN as u32)];
    // The `struct socket` pointer a sample follows for the writer's flags.
    if sock.sk_socket != u32::MAX {
        own.push((sock.sk_socket, 8));
    }
    if !sock.ca_priv.is_multiple_of(8) {
        bail!(
            "this kernel's icsk_ca_priv is at byte {}, not a multiple of 8 (an array of u64 on every kernel \
             bbrscope knows): its layout is not one bbrscope can read",
            sock.ca_priv
        );
    }
    span_of(fields.iter().filter(|f| f.len > 0).map(|f| (f.off, f.len)).chain(own))
}

/// The smallest span (start a multiple of 8) holding every `(offset, length)`; an error when it
/// is longer than the programs' buffer.
fn span_of(ranges: impl Iterator<Item = (u32, u32)>) -> Result<Span> {
    let (start, end) = ranges.fold((u32::MAX, 0), |(s, e), (off, len)| (s.min(off), e.max(off + len)));
    if start > end {
        bail!("no socket fields to sample");
    }
    let off = start / 8 * 8;
    let len = end - off;
    if len as usize > SPAN_BUF {
        bail!(
            "the socket fields a sample copies lie {len} bytes apart on this kernel (from byte {off} of the \
             socket), more than the {SPAN_BUF}-byte buffer bbrscope's programs read them into (SPAN_BUF in \
             bbrscope-common): this kernel's struct tcp_sock is not laid out as any bbrscope was built for"
        );
    }
    Ok(Span { off, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_table_matches_enum_order() {
        for (i, (f, _, _)) in FIELDS.iter().enumerate() {
            assert_eq!(*f as usize, i, "{f:?} out of order");
        }
        assert!(FIELDS.len() <= MAX_FIELDS);
    }

    #[test]
    fn extract_bitfields_little_endian() {
        // 5-bit field at bit 3 of byte 1: bytes [.., 0b1010_1000, ..] -> 0b10101.
        let bytes = [0xff, 0b1010_1000, 0xff, 0, 0, 0, 0, 0];
        assert_eq!(bits_at(&bytes, 8 + 3, 5), Some(0b10101));
        // A 10-bit field spanning two bytes.
        let bytes = [0b1100_0000, 0b0000_1111];
        assert_eq!(bits_at(&bytes, 6, 10), Some(0b11_1111));
        assert_eq!(bits_at(&bytes, 16, 8), None);
    }

    #[test]
    fn the_span_holds_every_range_from_a_word_boundary_and_refuses_more_than_the_buffer() {
        let span = span_of([(1444, 4), (488, 8), (1641, 1), (1296, 104)].into_iter()).unwrap();
        assert_eq!(span, Span { off: 488, len: 1642 - 488 });
        let span = span_of([(1444, 4), (1501, 2)].into_iter()).unwrap();
        assert_eq!(span, Span { off: 1440, len: 63 }, "starts at the word holding the first byte");
        let widest = span_of([(8, 8), (SPAN_BUF as u32, 8)].into_iter()).unwrap();
        assert_eq!(widest.len as usize, SPAN_BUF);
        let err = span_of([(8, 8), (SPAN_BUF as u32 + 1, 8)].into_iter()).unwrap_err().to_string();
        assert!(err.contains("4097 bytes apart") && err.contains("4096-byte buffer"), "{err}");
        assert!(span_of(std::iter::empty()).is_err());
    }

    /// The running kernel's layout (where it has BTF): every field a sample copies lies in the
    /// span, which fits the buffer.
    #[test]
    fn this_kernels_sample_fields_lie_in_one_span() {
        let Ok(btf) = Btf::kernel() else { return };
        let layout = Layout::from_btf(&btf).unwrap();
        let Span { off, len } = layout.span;
        let inside = |o: u32, l: u32| o >= off && o + l <= off + len;
        for (i, f) in layout.fields.iter().enumerate().filter(|(_, f)| f.len > 0) {
            assert!(inside(f.off, f.len), "field {i} at {} outside {off}+{len}", f.off);
        }
        let s = layout.sock;
        assert!(inside(s.ca_ops, 8) && inside(s.ca_state.off, 4) && inside(s.bytes_acked, 8));
        assert!(inside(s.ca_priv, CA_PRIV_LEN as u32));
        assert!(s.sk_socket == u32::MAX || inside(s.sk_socket, 8));
        assert!(len as usize <= SPAN_BUF && off.is_multiple_of(8));
    }

    #[test]
    fn byte_field_for_plain_and_bitfield_members() {
        let (spec, ex) = byte_field(Location { bit_offset: 1444 * 8, bits: 32 }).unwrap();
        assert_eq!(spec, FieldSpec { off: 1444, len: 4 });
        assert_eq!(ex.apply(0xdead_beef_0000_0007), 7);
        let (spec, ex) = byte_field(Location { bit_offset: 100 * 8 + 6, bits: 1 }).unwrap();
        assert_eq!(spec, FieldSpec { off: 100, len: 1 });
        assert_eq!(ex.apply(0b0100_0000), 1);
        assert_eq!(ex.apply(0b1011_1111), 0);
    }
}
