//! `bbrscope stream`'s output: one JSON object per line. The schema is documented in
//! docs/stream.md; every object has `type` and `ts` (Unix seconds), flow objects also `cookie`,
//! `src`, `dst`, `cc` and `ca_state`.
//!
//! The records are the types of [`crate::observe::schema`], written by hand into one reused
//! buffer in the order the types list their fields: at thousands of flow ends a second, serde's
//! derived serializers spent most of bbrscope's time escaping the same literal keys and
//! allocating temporaries (profiled in bench/README.md). Values still go through serde_json's own
//! number and string formatting, and in tests every line is checked byte for byte against what
//! the types' derived `Serialize` writes.

use std::{
    borrow::Cow,
    io::{self, Write},
    net::SocketAddr,
};

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter as _};

use crate::{
    observe::clock::Clock,
    observe::event::{Bbr, CaState, Cubic, EndReason, Event, Metrics, tcp_state_name},
    observe::flow::{Change, Flow, FlowTable},
    observe::pipeline::{NoSide, Sink},
    observe::schema::{
        self, CaSeconds, Close, CongState, FlowHead, FlowRecord, Owner, Retransmit, Sample, Stats, Summary,
    },
    observe::stats::StatsReport,
    sys::cgroup::CgroupNames,
};

/// Output is handed over in pieces of about this size, and at every `flush` (after each batch
/// of records): at 5,000 short flows a second a batch's lines (~0.6 MB) go as one piece.
const WRITE_AT: usize = 1 << 20;

/// Where a [`JsonSink`]'s lines go, a buffer at a time.
pub(crate) trait Output {
    /// Takes every byte of `buf`, leaving it empty (with room for the next lines).
    fn take(&mut self, buf: &mut Vec<u8>) -> io::Result<()>;
    fn flush(&mut self) -> io::Result<()>;
}

/// A plain writer (a file, a test's vector) gets one write per buffer.
impl<W: Write> Output for W {
    fn take(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        let r = self.write_all(buf);
        buf.clear();
        r
    }

    fn flush(&mut self) -> io::Result<()> {
        Write::flush(self)
    }
}

/// A value as serde_json writes it.
trait Json {
    fn write(&self, out: &mut Vec<u8>);
}

/// Two-digit pairs "00" to "99".
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// `v` in decimal (as serde_json's itoa writes it: the one canonical form), formed in place: 20
/// bytes are appended, the digits written over them, and the vector cut to the digits. Copying
/// itoa's variable-length output was one libc memcpy call per number (~10% of the sink's time),
/// and a digit array on the stack copied whole stalled on store forwarding.
#[inline]
fn write_int(out: &mut Vec<u8>, mut v: u64) {
    let n = v.checked_ilog10().map_or(1, |d| d as usize + 1);
    let len = out.len();
    out.extend_from_slice(&[0u8; 20]);
    let digits = &mut out[len..len + n];
    let mut i = n;
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    }
    if v >= 10 {
        let d = v as usize * 2;
        digits[i - 2..i].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    } else {
        digits[i - 1] = b'0' + v as u8;
    }
    out.truncate(len + n);
}

impl Json for u64 {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        write_int(out, *self);
    }
}

impl Json for u32 {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        write_int(out, u64::from(*self));
    }
}

impl Json for f64 {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        // serde_json writes NaN and infinities as null.
        if *self == 0.0 && self.is_sign_positive() {
            // Most congestion states' seconds: what serde_json writes, without formatting.
            out.extend_from_slice(b"0.0");
        } else if self.is_finite() {
            let _ = CompactFormatter.write_f64(out, *self);
        } else {
            out.extend_from_slice(b"null");
        }
    }
}

impl Json for bool {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if *self { b"true" } else { b"false" });
    }
}

impl Json for str {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        let _ = serde_json::to_writer(out, self);
    }
}

impl Json for String {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        self.as_str().write(out);
    }
}

impl Json for crate::sys::name::Name {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        self.as_str().write(out);
    }
}

impl Json for std::sync::Arc<str> {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        (**self).write(out);
    }
}

impl<T: Json + ToOwned + ?Sized> Json for Cow<'_, T> {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        (**self).write(out);
    }
}

impl<T: Json + ?Sized> Json for &T {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        (**self).write(out);
    }
}

impl<T: Json> Json for Option<T> {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Some(v) => v.write(out),
            None => out.extend_from_slice(b"null"),
        }
    }
}

impl<T: Json> Json for [T] {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, v) in self.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            v.write(out);
        }
        out.push(b']');
    }
}

/// Names that are JSON strings as they are (no character needs escaping).
#[inline]
fn plain(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// A literal that is a JSON string as it is (record types).
struct Plain<'a>(&'a str);

impl Json for Plain<'_> {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        plain(out, self.0);
    }
}

impl Json for CaState {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        plain(out, self.as_str());
    }
}

impl Json for EndReason {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        plain(out, self.as_str());
    }
}

/// An address as `ip:port` (`[ip]:port` for IPv6), as its `Display` writes it.
impl Json for SocketAddr {
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        out.push(b'"');
        match self {
            // The common case, without the formatting machinery.
            SocketAddr::V4(a) => {
                for (i, octet) in a.ip().octets().into_iter().enumerate() {
                    if i > 0 {
                        out.push(b'.');
                    }
                    write_int(out, u64::from(octet));
                }
                out.push(b':');
                write_int(out, u64::from(a.port()));
            }
            SocketAddr::V6(_) => {
                let _ = write!(out, "{self}");
            }
        }
        out.push(b'"');
    }
}

/// A field's key with its punctuation, `,"name":`, as one piece of text.
macro_rules! k {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}

/// One JSON object being written. Every field is written as `,"key":value`; [`Obj::end`] turns
/// the first comma into the opening brace, so that a key costs one copy and no branch.
struct Obj<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> Obj<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        let start = out.len();
        Obj { out, start }
    }

    /// `key` comes from [`k!`]: `,"name":` with a name that needs no escaping.
    #[inline(always)]
    fn field(&mut self, key: &'static str, v: impl Json) -> &mut Self {
        debug_assert!(key.starts_with(",\"") && key.ends_with("\":") && !key[2..key.len() - 2].contains(['"', '\\']));
        self.out.extend_from_slice(key.as_bytes());
        v.write(self.out);
        self
    }

    /// A nested object, or null.
    fn object<T>(&mut self, key: &'static str, v: Option<&T>, body: impl FnOnce(&mut Obj, &T)) -> &mut Self {
        self.out.extend_from_slice(key.as_bytes());
        match v {
            Some(v) => {
                let mut o = Obj::new(self.out);
                body(&mut o, v);
                o.end();
            }
            None => self.out.extend_from_slice(b"null"),
        }
        self
    }

    fn end(self) {
        if self.out.len() == self.start {
            self.out.extend_from_slice(b"{}");
        } else {
            self.out[self.start] = b'{';
            self.out.push(b'}');
        }
    }
}

/// Every `sample` field, in `Metrics` order (`sample` and `flow_close` carry them).
fn metrics(o: &mut Obj, m: &Metrics) {
    o.field(k!("cwnd"), m.cwnd)
        .field(k!("ssthresh"), m.ssthresh)
        .field(k!("srtt_us"), m.srtt_us)
        .field(k!("rttvar_us"), m.rttvar_us)
        .field(k!("min_rtt_us"), m.min_rtt_us)
        .field(k!("pacing_rate_bps"), m.pacing_rate_bps)
        .field(k!("delivery_rate_bps"), m.delivery_rate_bps)
        .field(k!("delivery_app_limited"), m.delivery_app_limited)
        .field(k!("bytes_acked"), m.bytes_acked)
        .field(k!("bytes_sent"), m.bytes_sent)
        .field(k!("bytes_retrans"), m.bytes_retrans)
        .field(k!("bytes_received"), m.bytes_received)
        .field(k!("retrans_total"), m.retrans_total)
        .field(k!("data_segs_out"), m.data_segs_out)
        .field(k!("segs_out"), m.segs_out)
        .field(k!("segs_in"), m.segs_in)
        .field(k!("data_segs_in"), m.data_segs_in)
        .field(k!("unacked"), m.unacked)
        .field(k!("in_flight"), m.in_flight)
        .field(k!("lost"), m.lost)
        .field(k!("sacked"), m.sacked)
        .field(k!("retrans_out"), m.retrans_out)
        .field(k!("delivered"), m.delivered)
        .field(k!("mss"), m.mss)
        .field(k!("snd_wnd"), m.snd_wnd)
        .field(k!("busy_us"), m.busy_us)
        .field(k!("rwnd_limited_us"), m.rwnd_limited_us)
        .field(k!("sndbuf_limited_us"), m.sndbuf_limited_us)
        .field(k!("sndbuf_bytes"), m.sndbuf_bytes)
        .field(k!("wmem_queued_bytes"), m.wmem_queued_bytes)
        .field(k!("notsent_bytes"), m.notsent_bytes)
        .field(k!("rcvbuf_bytes"), m.rcvbuf_bytes)
        .field(k!("rcv_space_bytes"), m.rcv_space_bytes)
        .field(k!("rcv_rtt_us"), m.rcv_rtt_us)
        .field(k!("rcv_ssthresh_bytes"), m.rcv_ssthresh_bytes)
        .field(k!("window_clamp_bytes"), m.window_clamp_bytes)
        .field(k!("nospace"), m.nospace)
        .field(k!("sndbuf_locked"), m.sndbuf_locked)
        .field(k!("rcvbuf_locked"), m.rcvbuf_locked)
        .object(k!("bbr"), m.bbr.as_ref(), |o, b: &Bbr| {
            o.field(k!("mode"), &b.mode)
                .field(k!("bw_bps"), b.bw_bps)
                .field(k!("min_rtt_us"), b.min_rtt_us)
                .field(k!("pacing_gain"), b.pacing_gain)
                .field(k!("cwnd_gain"), b.cwnd_gain)
                .field(k!("full_bw_reached"), b.full_bw_reached)
                .field(k!("cycle_idx"), b.cycle_idx);
        })
        .object(k!("cubic"), m.cubic.as_ref(), |o, c: &Cubic| {
            o.field(k!("w_max"), c.w_max);
        });
}

/// A record's fields in the order its type lists them: what its derived `Serialize` writes
/// (checked by [`line`] in tests), without serde's per-key escaping.
trait Fields {
    fn fields(&self, o: &mut Obj);
}

/// Writes `rec` as one line of `buf`.
fn line<T: Fields + Serialize>(buf: &mut Vec<u8>, rec: &T) {
    // Room for the longest line (a summary is ~900 bytes): no growth checks fail below.
    buf.reserve(4096);
    #[cfg(test)]
    let start = buf.len();
    let mut o = Obj::new(buf);
    rec.fields(&mut o);
    o.end();
    #[cfg(test)]
    assert_eq!(std::str::from_utf8(&buf[start..]).unwrap(), serde_json::to_string(rec).unwrap());
    buf.push(b'\n');
}

impl<B: Fields> Fields for FlowRecord<'_, B> {
    #[inline]
    fn fields(&self, o: &mut Obj) {
        self.head.fields(o);
        self.body.fields(o);
    }
}

impl Fields for FlowHead<'_> {
    #[inline]
    fn fields(&self, o: &mut Obj) {
        // The sink's record types are literals that need no escaping.
        o.field(k!("type"), Plain(&self.ty))
            .field(k!("ts"), self.ts)
            .field(k!("cookie"), self.cookie)
            .field(k!("src"), self.src)
            .field(k!("dst"), self.dst)
            .field(k!("cc"), self.cc)
            .field(k!("ca_state"), self.ca_state);
    }
}

impl Fields for Owner<'_> {
    #[inline]
    fn fields(&self, o: &mut Obj) {
        o.field(k!("side"), &self.side)
            .field(k!("pid"), self.pid)
            .field(k!("comm"), self.comm)
            .field(k!("cgroup"), &self.cgroup)
            .field(k!("cgroup_id"), self.cgroup_id)
            .field(k!("netns"), self.netns);
        if let Some(arm) = &self.arm {
            o.field(k!("arm"), arm);
        }
        if let Some(sq) = &self.status_quo {
            o.field(k!("status_quo"), sq);
        }
    }
}

impl Fields for Sample<'_> {
    #[inline]
    fn fields(&self, o: &mut Obj) {
        o.field(k!("state"), &self.state)
            .field(k!("acks"), self.acks)
            .field(k!("throughput_bps"), self.throughput_bps)
            .field(k!("retrans_coalesced"), self.retrans_coalesced);
        metrics(o, &self.metrics);
    }
}

impl Fields for Close<'_> {
    #[inline]
    fn fields(&self, o: &mut Obj) {
        o.field(k!("duration_s"), self.duration_s)
            .field(k!("goodput_bps"), self.goodput_bps)
            .field(k!("retransmit_events"), self.retransmit_events)
            .field(k!("retrans_coalesced"), self.retrans_coalesced);
        metrics(o, &self.metrics);
    }
}

impl Fields for Retransmit {
    #[inline]
    fn fields(&self, o: &mut Obj) {
        o.field(k!("segs"), self.segs)
            .field(k!("retrans_total"), self.retrans_total)
            .field(k!("cwnd"), self.cwnd)
            .field(k!("ssthresh"), self.ssthresh);
    }
}

impl Fields for CongState {
    #[inline]
    fn fields(&self, o: &mut Obj) {
        o.field(k!("from"), self.from)
            .field(k!("to"), self.to)
            .field(k!("cwnd"), self.cwnd)
            .field(k!("ssthresh"), self.ssthresh);
    }
}

impl Fields for CaSeconds {
    #[inline]
    fn fields(&self, o: &mut Obj) {
        o.field(k!("open"), self.open)
            .field(k!("disorder"), self.disorder)
            .field(k!("cwr"), self.cwr)
            .field(k!("recovery"), self.recovery)
            .field(k!("loss"), self.loss);
    }
}

impl Fields for Summary<'_> {
    fn fields(&self, o: &mut Obj) {
        o.field(k!("start_ts"), self.start_ts).field(k!("duration_s"), self.duration_s).field(k!("end"), self.end);
        self.owner.fields(o);
        o.field(k!("ccs"), &self.ccs)
            .field(k!("bbr_modes"), &self.bbr_modes)
            .field(k!("bytes_sent"), self.bytes_sent)
            .field(k!("bytes_acked"), self.bytes_acked)
            .field(k!("bytes_received"), self.bytes_received)
            .field(k!("bytes_retrans"), self.bytes_retrans)
            .field(k!("segs_out"), self.segs_out)
            .field(k!("segs_in"), self.segs_in)
            .field(k!("data_segs_out"), self.data_segs_out)
            .field(k!("data_segs_in"), self.data_segs_in)
            .field(k!("retrans_total"), self.retrans_total)
            .field(k!("retrans_at_open"), self.retrans_at_open)
            .field(k!("retransmit_events"), self.retransmit_events)
            .field(k!("retrans_coalesced"), self.retrans_coalesced)
            .field(k!("retrans_failed"), self.retrans_failed)
            .field(k!("srtt_first_us"), self.srtt_first_us)
            .field(k!("srtt_min_us"), self.srtt_min_us)
            .field(k!("srtt_median_us"), self.srtt_median_us)
            .field(k!("srtt_max_us"), self.srtt_max_us)
            .field(k!("srtt_last_us"), self.srtt_last_us)
            .field(k!("min_rtt_us"), self.min_rtt_us)
            .field(k!("cwnd_max"), self.cwnd_max)
            .object(k!("ca_state_s"), Some(&self.ca_state_s), |o, s: &CaSeconds| s.fields(o))
            .field(k!("goodput_bps"), self.goodput_bps)
            .field(k!("delivery_rate_bps"), self.delivery_rate_bps)
            .field(k!("delivery_app_limited"), self.delivery_app_limited)
            .field(k!("pacing_rate_bps"), self.pacing_rate_bps)
            .field(k!("bbr_bw_bps"), self.bbr_bw_bps)
            .field(k!("mss"), self.mss)
            .field(k!("busy_us"), self.busy_us)
            .field(k!("rwnd_limited_us"), self.rwnd_limited_us)
            .field(k!("sndbuf_limited_us"), self.sndbuf_limited_us)
            .field(k!("samples"), self.samples)
            .field(k!("rtt_events"), self.rtt_events)
            .field(k!("slow_path_acks"), self.slow_path_acks)
            .field(k!("send_events"), self.send_events);
    }
}

/// A flow's owner as its records show it (all null on the tracepoint path): `flow_open` and
/// `flow_summary`.
fn owner<'a>(cgroups: &'a mut CgroupNames, flow: &Flow) -> Owner<'a> {
    let Some(o) = flow.life.owner.as_ref() else { return Owner::default() };
    Owner {
        side: o.side.map(Cow::Borrowed),
        pid: o.pid,
        comm: o.comm,
        cgroup: o.cgroup_id.and_then(|id| cgroups.name(id)).map(Cow::Borrowed),
        cgroup_id: o.cgroup_id,
        netns: o.netns,
        arm: o.arm.map(|arm| Cow::Borrowed(if arm == 1 { "a" } else { "b" })),
        status_quo: o.status_quo.map(|arms| Cow::Borrowed(schema::status_quo_word(arms))),
    }
}

/// The `flow_summary` of a flow that ended.
fn summary<'a>(clock: &Clock, cgroups: &'a mut CgroupNames, flow: &'a Flow) -> Option<Summary<'a>> {
    let e = flow.life.end.as_ref()?;
    let m = flow.metrics.as_ref();
    let get = |f: fn(&Metrics) -> Option<u64>| m.and_then(f);
    let get32 = |f: fn(&Metrics) -> Option<u32>| m.and_then(f);
    let start = flow.life.start_ns.unwrap_or(flow.first_ns);
    let duration_ns = e.head.ts_ns.saturating_sub(start);
    let goodput_bps = match get(|m| m.bytes_acked) {
        Some(b) if duration_ns > 0 => Some((u128::from(b) * 8 * 1_000_000_000 / u128::from(duration_ns)) as u64),
        _ => None,
    };
    let secs = |i: usize| flow.life.ca_ns[i] as f64 / 1e9;
    Some(Summary {
        start_ts: flow.life.start_ns.map(|s| clock.unix_secs(s)),
        duration_s: duration_ns as f64 / 1e9,
        end: Some(e.end),
        owner: owner(cgroups, flow),
        ccs: Cow::Borrowed(&flow.life.ccs),
        bbr_modes: Cow::Borrowed(&flow.life.bbr_modes),
        bytes_sent: get(|m| m.bytes_sent),
        bytes_acked: get(|m| m.bytes_acked),
        bytes_received: get(|m| m.bytes_received),
        bytes_retrans: get(|m| m.bytes_retrans),
        segs_out: get32(|m| m.segs_out),
        segs_in: get32(|m| m.segs_in),
        data_segs_out: get32(|m| m.data_segs_out),
        data_segs_in: get32(|m| m.data_segs_in),
        retrans_total: get32(|m| m.retrans_total),
        retrans_at_open: flow.life.retrans_at_open,
        retransmit_events: flow.retransmits,
        retrans_coalesced: e.retrans_coalesced,
        retrans_failed: e.retrans_failed,
        srtt_first_us: e.srtt_first_us,
        srtt_min_us: e.srtt_min_us,
        srtt_median_us: flow.life.srtt_median_us(),
        srtt_max_us: e.srtt_max_us,
        srtt_last_us: get32(|m| m.srtt_us),
        min_rtt_us: get32(|m| m.min_rtt_us),
        cwnd_max: e.cwnd_max,
        ca_state_s: CaSeconds { open: secs(0), disorder: secs(1), cwr: secs(2), recovery: secs(3), loss: secs(4) },
        goodput_bps,
        delivery_rate_bps: get(|m| m.delivery_rate_bps),
        delivery_app_limited: m.and_then(|m| m.delivery_app_limited),
        pacing_rate_bps: get(|m| m.pacing_rate_bps),
        bbr_bw_bps: m.and_then(|m| m.bbr.as_ref()).and_then(|b| b.bw_bps),
        mss: get32(|m| m.mss),
        busy_us: get(|m| m.busy_us),
        rwnd_limited_us: get(|m| m.rwnd_limited_us),
        sndbuf_limited_us: get(|m| m.sndbuf_limited_us),
        samples: e.samples,
        rtt_events: e.rtt_events,
        slow_path_acks: e.slow_path_acks,
        send_events: e.send_events,
    })
}

/// The fields every flow record starts with.
fn flow_head<'a>(clock: &Clock, ty: &'static str, ts_ns: u64, flow: &Flow, state: CaState) -> FlowHead<'a> {
    FlowHead {
        ty: Cow::Borrowed(ty),
        ts: clock.unix_secs(ts_ns),
        cookie: flow.id,
        src: flow.src,
        dst: flow.dst,
        cc: flow.cc,
        ca_state: state,
    }
}

pub(crate) struct JsonSink<W: Output> {
    out: W,
    /// Lines not yet handed to `out`.
    buf: Vec<u8>,
    clock: Clock,
    cgroups: CgroupNames,
}

impl<W: Output> JsonSink<W> {
    /// `out` gets large pieces (about [`WRITE_AT`] bytes, and what is left at each `flush`): it
    /// needs no buffer of its own.
    pub(crate) fn new(out: W, clock: Clock) -> Self {
        JsonSink { out, buf: Vec::with_capacity(WRITE_AT + 4096), clock, cgroups: CgroupNames::new() }
    }

    fn write_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() < WRITE_AT {
            return Ok(());
        }
        self.write_buf()
    }

    fn write_buf(&mut self) -> io::Result<()> {
        self.out.take(&mut self.buf)
    }

    /// The writer, after [`JsonSink::flush`].
    pub(crate) fn writer(&mut self) -> &mut W {
        &mut self.out
    }
}

impl<W: Output> Sink for JsonSink<W> {
    type Side = NoSide;
    /// Writes what `ev` means, after it has been applied to `table` (with result `change`).
    fn event(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()> {
        let h = ev.head();
        let Some(flow) = table.get(h.flow) else { return Ok(()) };
        let clock = &self.clock;
        let buf = &mut self.buf;
        let head = |ty, state| flow_head(clock, ty, h.ts_ns, flow, state);
        // A flow whose only record was its close is shown as its summary alone (its opening and
        // final sample would repeat it, at thousands of short flows a second).
        let summary_only = flow.life.summary_only;
        if change == Change::Opened && !summary_only {
            // When the flow started (on `sockops` its OPEN record comes later, with its first
            // other record).
            let head = flow_head(clock, "flow_open", flow.first_ns, flow, h.ca_state);
            line(buf, &FlowRecord { head, body: owner(&mut self.cgroups, flow) });
        }
        match ev {
            Event::Open(_) => {}
            Event::End(_) => {
                if let Some(body) = summary(clock, &mut self.cgroups, flow) {
                    line(buf, &FlowRecord { head: head("flow_summary", h.ca_state), body });
                }
            }
            Event::Sample(s) if s.closing && summary_only => {}
            Event::Sample(s) if s.closing => {
                let body = Close {
                    duration_s: flow.duration_ns() as f64 / 1e9,
                    goodput_bps: flow.mean_goodput_bps(),
                    retransmit_events: flow.retransmits,
                    retrans_coalesced: s.retrans_coalesced,
                    metrics: Cow::Borrowed(&s.metrics),
                };
                line(buf, &FlowRecord { head: head("flow_close", h.ca_state), body });
            }
            Event::Sample(s) => {
                let body = Sample {
                    state: tcp_state_name(h.tcp_state).map(Cow::Borrowed),
                    acks: s.acks,
                    throughput_bps: flow.throughput_bps,
                    retrans_coalesced: s.retrans_coalesced,
                    metrics: Cow::Borrowed(&s.metrics),
                };
                line(buf, &FlowRecord { head: head("sample", h.ca_state), body });
            }
            Event::Retransmit(r) => {
                let body =
                    Retransmit { segs: r.segs, retrans_total: r.retrans_total, cwnd: r.cwnd, ssthresh: r.ssthresh };
                line(buf, &FlowRecord { head: head("retransmit", h.ca_state), body });
            }
            Event::CongState(c) => {
                let body = CongState { from: c.from, to: c.to, cwnd: c.cwnd, ssthresh: c.ssthresh };
                line(buf, &FlowRecord { head: head("cong_state", c.to), body });
            }
        }
        self.write_if_full()
    }

    fn stats(&mut self, now_ns: u64, stats: &StatsReport) -> io::Result<()> {
        let rec = Stats { ty: Cow::Borrowed("stats"), ts: self.clock.unix_secs(now_ns), stats: Cow::Borrowed(stats) };
        serde_json::to_writer(&mut self.buf, &rec)?;
        self.buf.push(b'\n');
        self.write_if_full()
    }

    /// Hands every line so far to the writer, and flushes it.
    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.write_buf()?;
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::event::{Bbr, Head, RetransmitEvent, SampleEvent};

    fn metrics(acked: u64) -> Metrics {
        Metrics {
            cwnd: Some(10),
            ssthresh: None,
            srtt_us: Some(100_000),
            rttvar_us: Some(5_000),
            min_rtt_us: Some(99_000),
            pacing_rate_bps: Some(12_000_000),
            delivery_rate_bps: Some(10_000_000),
            delivery_app_limited: Some(false),
            bytes_acked: Some(acked),
            bytes_sent: Some(acked + 1000),
            bytes_retrans: Some(0),
            bytes_received: Some(0),
            retrans_total: Some(0),
            data_segs_out: Some(1),
            segs_out: Some(2),
            segs_in: Some(2),
            data_segs_in: Some(0),
            unacked: Some(3),
            in_flight: Some(3),
            lost: Some(0),
            sacked: Some(0),
            retrans_out: Some(0),
            delivered: Some(5),
            mss: Some(1448),
            snd_wnd: Some(65535),
            busy_us: Some(400_000),
            rwnd_limited_us: Some(0),
            sndbuf_limited_us: Some(100_000),
            sndbuf_bytes: Some(87_040),
            wmem_queued_bytes: Some(46_080),
            notsent_bytes: Some(0),
            rcvbuf_bytes: Some(131_072),
            rcv_space_bytes: Some(14_480),
            rcv_rtt_us: Some(0),
            rcv_ssthresh_bytes: Some(64_088),
            window_clamp_bytes: Some(64_088),
            nospace: Some(false),
            sndbuf_locked: Some(false),
            rcvbuf_locked: Some(false),
            bbr: Some(Bbr {
                mode: Some("probe_bw".into()),
                bw_bps: Some(9_000_000),
                min_rtt_us: Some(99_000),
                pacing_gain: Some(1.25),
                cwnd_gain: Some(2.0),
                full_bw_reached: Some(true),
                cycle_idx: Some(0),
            }),
            cubic: None,
        }
    }

    fn head(ts_ns: u64, first: bool) -> Head {
        Head {
            flow: 4097,
            ts_ns,
            src: "10.0.0.1:5000".parse().unwrap(),
            dst: "[2001:db8::2]:443".parse().unwrap(),
            ca_state: crate::observe::event::CaState::Open,
            first,
            tcp_state: 0,
        }
    }

    fn sample(ts_ns: u64, acked: u64, closing: bool) -> Event {
        Event::Sample(Box::new(SampleEvent {
            head: head(ts_ns, ts_ns == 0),
            closing,
            cc: "bbr".into(),
            acks: 7,
            retrans_coalesced: 0,
            metrics: metrics(acked),
        }))
    }

    /// Integers come out as their `Display` (which is what serde_json's itoa writes too).
    #[test]
    fn integers_are_written_in_decimal() {
        let mut values = vec![0, u64::MAX, u64::from(u32::MAX), u64::from(u32::MAX) + 1];
        for p in 0..20 {
            let t = 10u64.pow(p);
            values.extend([t - 1, t, t + 1, t.saturating_mul(9).saturating_add(9)]);
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (x % 64));
        }
        let mut out = b"x".to_vec();
        for v in values {
            out.truncate(1);
            write_int(&mut out, v);
            assert_eq!(&out[1..], v.to_string().as_bytes());
        }
    }

    /// Every kind of record, with what is rare in practice: owners whose names need escaping
    /// (quotes, backslashes, control characters, non-ASCII), IPv6 and IPv4 addresses, nulls,
    /// extreme integers, non-finite gains, both algorithms' private state, an experiment arm,
    /// a flow with no owner (the tracepoint path), each way a flow ends.
    fn varied_events() -> Vec<Event> {
        use crate::observe::event::{CongStateEvent, Cubic, EndEvent, OpenEvent, Owner};
        let mut evs = Vec::new();
        let ends = [
            EndReason::Fin,
            EndReason::ResetReceived,
            EndReason::ResetSent,
            EndReason::Timeout,
            EndReason::Refused,
            EndReason::Other,
            // A flow whose only record was its close: its summary alone.
            EndReason::Fin,
        ];
        for (i, end) in ends.into_iter().enumerate() {
            let flow = 1000 + i as u64;
            let mut h = head(1_000_000 * i as u64, true);
            h.flow = flow;
            if i % 2 == 1 {
                h.src = "127.0.0.1:80".parse().unwrap();
                h.dst = "[fe80::1:2]:65535".parse().unwrap();
            }
            let owner = Owner {
                side: Some(if i % 2 == 0 { "connect" } else { "accept" }),
                pid: (i != 2).then_some(u32::MAX - i as u32),
                comm: match i {
                    0 => Some("ng\"in\\x\n\t\u{1}\u{7f}é€😀".into()),
                    1 => Some("nginx".into()),
                    6 => Some("curl \"x\"".into()),
                    _ => None,
                },
                cgroup_id: Some(10 + i as u64),
                netns: Some(4026531840),
                arm: [None, Some(1), Some(2)][i % 3],
                status_quo: [None, Some([true, false]), Some([false, false])][i % 3],
                sock_ino: None,
            };
            if i != 5 {
                evs.push(Event::Open(Box::new(OpenEvent {
                    head: h.clone(),
                    cc: "bbr".into(),
                    owner,
                    start_ns: 500 * i as u64,
                    retrans_at_open: i as u32,
                    summary_only: i == 6,
                })));
            }
            let mut m = metrics(u64::MAX / 2 - i as u64);
            if i == 1 {
                let b = m.bbr.as_mut().unwrap();
                b.pacing_gain = Some(f64::NAN);
                b.cwnd_gain = Some(f64::INFINITY);
                b.mode = Some("mode_\"7\"".into());
            }
            if i == 2 {
                m.bbr = None;
                m.cubic = Some(Cubic { w_max: Some(17) });
            }
            if i == 3 {
                m = serde_json::from_str("{}").unwrap();
            }
            let cc = if i == 2 { "cubic" } else { "bbr" };
            let sample = |ts: u64, closing: bool, m: Metrics| {
                let mut hh = h.clone();
                hh.first = false;
                hh.ts_ns = ts;
                hh.tcp_state = (ts % 13) as u8;
                Event::Sample(Box::new(SampleEvent {
                    head: hh,
                    closing,
                    cc: cc.into(),
                    acks: 3,
                    retrans_coalesced: i as u32,
                    metrics: m,
                }))
            };
            if i != 6 {
                evs.push(sample(h.ts_ns + 100_000_000, false, metrics(1000)));
                evs.push(Event::CongState(CongStateEvent {
                    head: Head { ts_ns: h.ts_ns + 150_000_000, ..h.clone() },
                    from: CaState::Open,
                    to: CaState::Recovery,
                    cwnd: 5,
                    ssthresh: None,
                }));
                evs.push(Event::Retransmit(RetransmitEvent {
                    head: Head { ts_ns: h.ts_ns + 160_000_000, ca_state: CaState::Recovery, ..h.clone() },
                    segs: 2,
                    retrans_total: 2,
                    cwnd: 5,
                    ssthresh: Some(u32::MAX),
                }));
            }
            evs.push(sample(h.ts_ns + 333_333_333, true, m));
            evs.push(Event::End(Box::new(EndEvent {
                head: Head { ts_ns: h.ts_ns + 333_333_333, first: false, ..h.clone() },
                start_ns: 500 * i as u64,
                end,
                rtt_events: u64::MAX,
                slow_path_acks: u32::MAX,
                send_events: u32::MAX,
                srtt_first_us: 1,
                srtt_min_us: 0,
                srtt_max_us: u32::MAX,
                cwnd_max: 10,
                retrans_records: 1,
                retrans_coalesced: 7,
                samples: 2,
                retrans_failed: 1,
            })));
        }
        evs
    }

    /// The hand-written lines are exactly what serde's derived serializers write of the schema's
    /// types ([`line`] checks each one in tests): every kind of record, every field in the same
    /// order, every value formatted and escaped the same way. And each line reads back into its
    /// type as it was written, as replay reads it.
    #[test]
    fn lines_equal_the_schema_types_serde_output_and_read_back() {
        /// A line read into its type, as JSON (numbers parsed as reading the line parses them).
        fn read<'a, B: Serialize + serde::Deserialize<'a>>(l: &'a str) -> serde_json::Value {
            serde_json::to_value(serde_json::from_str::<FlowRecord<B>>(l).unwrap()).unwrap()
        }
        let names = [(10u64, "/"), (11, "/system.slice/a \"b\"\\c\n.service"), (12, "/ünï")];
        let clock = Clock::with_offset(1_795_409_178_787_404_123);
        let mut out = Vec::new();
        let mut sink = JsonSink::new(&mut out, clock);
        sink.cgroups = CgroupNames::fixed(names.into_iter().map(|(i, n)| (i, n.to_string())));
        let mut table = FlowTable::new(0);
        for ev in varied_events() {
            let change = table.apply(&ev);
            sink.event(&ev, change, &table).unwrap();
        }
        sink.flush().unwrap();
        drop(sink);
        let got = String::from_utf8(out).unwrap();
        for l in got.lines() {
            let read_back = match l.split('"').nth(3).unwrap() {
                "flow_open" => read::<Owner>(l),
                "sample" => read::<Sample>(l),
                "flow_close" => read::<Close>(l),
                "retransmit" => read::<Retransmit>(l),
                "cong_state" => read::<CongState>(l),
                "flow_summary" => read::<Summary>(l),
                ty => panic!("{ty}"),
            };
            assert_eq!(read_back, serde_json::from_str::<serde_json::Value>(l).unwrap(), "{l}");
        }
        // The cases the events were built for are in there.
        for needle in [r#""comm":"ng\"in\\x\n\t\u0001"#, r#""cgroup":"/system.slice/a \"b\"\\c\n.service""#] {
            assert!(got.contains(needle), "{needle} missing");
        }
        assert!(got.contains(r#""pacing_gain":null,"cwnd_gain":null"#));
        assert!(got.contains(r#""dst":"[fe80::1:2]:65535""#));
        assert!(got.contains(r#""arm":"b""#));
        let count = |ty: &str| got.lines().filter(|l| l.starts_with(&format!(r#"{{"type":"{ty}""#))).count();
        assert_eq!((count("flow_summary"), count("flow_open"), count("flow_close")), (7, 6, 6));
        // The flow whose only record was its close: one line, its summary, with the final rates.
        let only: Vec<&str> = got.lines().filter(|l| l.contains(r#""cookie":1006,"#)).collect();
        assert_eq!(only.len(), 1, "{only:?}");
        for needle in [r#""comm":"curl \"x\"""#, r#""delivery_rate_bps":10000000,"delivery_app_limited":false"#] {
            assert!(only[0].contains(needle), "{needle} missing in {}", only[0]);
        }
        assert!(only[0].contains(r#""pacing_rate_bps":12000000,"bbr_bw_bps":"#), "{}", only[0]);
    }

    #[test]
    fn records_have_the_documented_shape() {
        let mut out = Vec::new();
        let mut sink = JsonSink::new(&mut out, Clock::with_offset(1_700_000_000_000_000_000));
        let mut table = FlowTable::new(0);
        let events = [
            sample(0, 1_000, false),
            sample(1_000_000_000, 1_251_000, false),
            Event::Retransmit(RetransmitEvent {
                head: head(1_100_000_000, false),
                segs: 1,
                retrans_total: 1,
                cwnd: 7,
                ssthresh: Some(7),
            }),
            sample(2_000_000_000, 2_501_000, true),
        ];
        for ev in &events {
            let change = table.apply(ev);
            sink.event(ev, change, &table).unwrap();
        }
        sink.flush().unwrap();
        drop(sink);
        let lines: Vec<serde_json::Value> =
            String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["flow_open", "sample", "sample", "retransmit", "flow_close"]);
        for l in &lines {
            assert_eq!(l["cookie"], 4097);
            assert_eq!(l["src"], "10.0.0.1:5000");
            assert_eq!(l["dst"], "[2001:db8::2]:443");
            assert_eq!(l["cc"], "bbr");
            assert!(l["ts"].as_f64().unwrap() >= 1_700_000_000.0);
        }
        let s = &lines[2];
        assert_eq!(s["ssthresh"], serde_json::Value::Null);
        assert_eq!(s["srtt_us"], 100_000);
        assert_eq!(s["bbr"]["mode"], "probe_bw");
        assert_eq!(s["bbr"]["pacing_gain"], 1.25);
        // 1.25 MB in one second.
        assert_eq!(s["throughput_bps"], 10_000_000);
        assert_eq!(lines[3]["segs"], 1);
        let close = &lines[4];
        assert_eq!(close["duration_s"], 2.0);
        assert_eq!(close["goodput_bps"], 10_000_000);
        assert_eq!(close["retransmit_events"], 1);
    }
}
