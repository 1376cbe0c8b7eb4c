//! `bbrscope stream`'s output: one JSON object per line. The schema is documented in
//! docs/stream.md; every object has `type` and `ts` (Unix seconds), flow objects also `cookie`,
//! `src`, `dst`, `cc` and `ca_state`.
//!
//! Flow records are written by hand into one reused buffer, in the field order the schema lists:
//! at thousands of flow ends a second, serde's derived serializers spent most
//! of bbrscope's time escaping the same literal keys and allocating temporaries (profiled in
//! bench/README.md). Values still go through serde_json's own number and string formatting, and
//! a test checks every line byte for byte against the serde-derived records it replaced.

use std::{
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
    observe::stats::StatsReport,
    sys::cgroup::CgroupNames,
};

/// Output is handed to the writer in pieces of about this size (and at every `flush`).
const WRITE_AT: usize = 1 << 16;

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
struct Plain(&'static str);

impl Json for Plain {
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

#[derive(Serialize)]
struct StatsRecord<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    ts: f64,
    #[serde(flatten)]
    stats: &'a StatsReport,
}

pub(crate) struct JsonSink<W: Write> {
    out: W,
    /// Lines not yet handed to `out`.
    buf: Vec<u8>,
    clock: Clock,
    cgroups: CgroupNames,
}

impl<W: Write> JsonSink<W> {
    /// `out` gets large writes (about [`WRITE_AT`] bytes, and what is left at each `flush`): it
    /// needs no buffer of its own.
    pub(crate) fn new(out: W, clock: Clock) -> Self {
        JsonSink { out, buf: Vec::with_capacity(WRITE_AT + 4096), clock, cgroups: CgroupNames::new() }
    }

    /// Who owns the flow (all null on the tracepoint path): `flow_open` and `flow_summary`.
    fn owner(cgroups: &mut CgroupNames, o: &mut Obj, flow: &Flow) {
        let owner = flow.life.owner.as_ref();
        let get = |f: fn(&crate::observe::event::Owner) -> Option<u32>| owner.and_then(f);
        let cgroup_id = owner.and_then(|o| o.cgroup_id);
        o.field(k!("side"), owner.and_then(|o| o.side))
            .field(k!("pid"), get(|o| o.pid))
            .field(k!("comm"), owner.and_then(|o| o.comm.as_ref()))
            .field(k!("cgroup"), cgroup_id.and_then(|id| cgroups.name(id)))
            .field(k!("cgroup_id"), cgroup_id)
            .field(k!("netns"), get(|o| o.netns));
        // `bbrscope experiment`'s arm: "a" or "b"; absent outside an experiment.
        if let Some(arm) = owner.and_then(|o| o.arm) {
            o.field(k!("arm"), if arm == 1 { "a" } else { "b" });
        }
    }

    fn summary(&mut self, o: &mut Obj, flow: &Flow) {
        let Some(e) = flow.life.end.as_ref() else { return };
        let m = flow.metrics.as_ref();
        let get = |f: fn(&Metrics) -> Option<u64>| m.and_then(f);
        let get32 = |f: fn(&Metrics) -> Option<u32>| m.and_then(f);
        let start = flow.life.start_ns.unwrap_or(flow.first_ns);
        let duration_ns = e.head.ts_ns.saturating_sub(start);
        let goodput_bps = match get(|m| m.bytes_acked) {
            Some(b) if duration_ns > 0 => Some((u128::from(b) * 8 * 1_000_000_000 / u128::from(duration_ns)) as u64),
            _ => None,
        };
        o.field(k!("start_ts"), flow.life.start_ns.map(|s| self.clock.unix_secs(s)))
            .field(k!("duration_s"), duration_ns as f64 / 1e9)
            .field(k!("end"), e.end);
        Self::owner(&mut self.cgroups, o, flow);
        o.field(k!("ccs"), flow.life.ccs.as_slice())
            .field(k!("bbr_modes"), flow.life.bbr_modes.as_slice())
            .field(k!("bytes_sent"), get(|m| m.bytes_sent))
            .field(k!("bytes_acked"), get(|m| m.bytes_acked))
            .field(k!("bytes_received"), get(|m| m.bytes_received))
            .field(k!("bytes_retrans"), get(|m| m.bytes_retrans))
            .field(k!("segs_out"), get32(|m| m.segs_out))
            .field(k!("segs_in"), get32(|m| m.segs_in))
            .field(k!("data_segs_out"), get32(|m| m.data_segs_out))
            .field(k!("data_segs_in"), get32(|m| m.data_segs_in))
            .field(k!("retrans_total"), get32(|m| m.retrans_total))
            .field(k!("retrans_at_open"), flow.life.retrans_at_open)
            .field(k!("retransmit_events"), flow.retransmits)
            .field(k!("retrans_coalesced"), e.retrans_coalesced)
            .field(k!("retrans_failed"), e.retrans_failed)
            .field(k!("srtt_first_us"), e.srtt_first_us)
            .field(k!("srtt_min_us"), e.srtt_min_us)
            .field(k!("srtt_median_us"), flow.life.srtt_median_us())
            .field(k!("srtt_max_us"), e.srtt_max_us)
            .field(k!("srtt_last_us"), get32(|m| m.srtt_us))
            .field(k!("min_rtt_us"), get32(|m| m.min_rtt_us))
            .field(k!("cwnd_max"), e.cwnd_max)
            .object(k!("ca_state_s"), Some(&flow.life.ca_ns), |o, ns: &[u64; 5]| {
                let secs = |i: usize| ns[i] as f64 / 1e9;
                o.field(k!("open"), secs(0))
                    .field(k!("disorder"), secs(1))
                    .field(k!("cwr"), secs(2))
                    .field(k!("recovery"), secs(3))
                    .field(k!("loss"), secs(4));
            })
            .field(k!("goodput_bps"), goodput_bps)
            .field(k!("delivery_rate_bps"), get(|m| m.delivery_rate_bps))
            .field(k!("delivery_app_limited"), m.and_then(|m| m.delivery_app_limited))
            .field(k!("pacing_rate_bps"), get(|m| m.pacing_rate_bps))
            .field(k!("bbr_bw_bps"), m.and_then(|m| m.bbr.as_ref()).and_then(|b| b.bw_bps))
            .field(k!("mss"), get32(|m| m.mss))
            .field(k!("busy_us"), get(|m| m.busy_us))
            .field(k!("rwnd_limited_us"), get(|m| m.rwnd_limited_us))
            .field(k!("sndbuf_limited_us"), get(|m| m.sndbuf_limited_us))
            .field(k!("samples"), e.samples)
            .field(k!("rtt_events"), e.rtt_events)
            .field(k!("slow_path_acks"), e.slow_path_acks)
            .field(k!("send_events"), e.send_events);
    }

    /// Starts a flow record: the fields every one carries.
    fn head<'b>(
        buf: &'b mut Vec<u8>,
        clock: &Clock,
        ty: &'static str,
        ts_ns: u64,
        flow: &Flow,
        state: CaState,
    ) -> Obj<'b> {
        // Room for the longest line (a summary is ~900 bytes): no growth checks fail below.
        buf.reserve(4096);
        let mut o = Obj::new(buf);
        o.field(k!("type"), Plain(ty))
            .field(k!("ts"), clock.unix_secs(ts_ns))
            .field(k!("cookie"), flow.id)
            .field(k!("src"), flow.src)
            .field(k!("dst"), flow.dst)
            .field(k!("cc"), flow.cc)
            .field(k!("ca_state"), state);
        o
    }

    fn write_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() < WRITE_AT {
            return Ok(());
        }
        self.write_buf()
    }

    fn write_buf(&mut self) -> io::Result<()> {
        let r = self.out.write_all(&self.buf);
        self.buf.clear();
        r
    }

    /// The writer, after [`JsonSink::flush`].
    pub(crate) fn writer(&mut self) -> &mut W {
        &mut self.out
    }
}

impl<W: Write> Sink for JsonSink<W> {
    type Side = NoSide;
    /// Writes what `ev` means, after it has been applied to `table` (with result `change`).
    fn event(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()> {
        let h = ev.head();
        let Some(flow) = table.get(h.flow) else { return Ok(()) };
        let mut buf = std::mem::take(&mut self.buf);
        // A flow whose only record was its close is shown as its summary alone (its opening and
        // final sample would repeat it, at thousands of short flows a second).
        let summary_only = flow.life.summary_only;
        if change == Change::Opened && !summary_only {
            // When the flow started (on `sockops` its OPEN record comes later, with its first
            // other record).
            let mut o = Self::head(&mut buf, &self.clock, "flow_open", flow.first_ns, flow, h.ca_state);
            Self::owner(&mut self.cgroups, &mut o, flow);
            o.end();
            buf.push(b'\n');
        }
        let clock = self.clock;
        let mut line = |ty, state, body: &mut dyn FnMut(&mut Self, &mut Obj)| {
            let mut o = Self::head(&mut buf, &clock, ty, h.ts_ns, flow, state);
            body(self, &mut o);
            o.end();
            buf.push(b'\n');
        };
        match ev {
            Event::Open(_) => {}
            Event::End(_) if flow.life.end.is_some() => {
                line("flow_summary", h.ca_state, &mut |s, o| s.summary(o, flow));
            }
            Event::End(_) => {}
            Event::Sample(s) if s.closing && summary_only => {}
            Event::Sample(s) if s.closing => line("flow_close", h.ca_state, &mut |_, o| {
                o.field(k!("duration_s"), flow.duration_ns() as f64 / 1e9)
                    .field(k!("goodput_bps"), flow.mean_goodput_bps())
                    .field(k!("retransmit_events"), flow.retransmits)
                    .field(k!("retrans_coalesced"), s.retrans_coalesced);
                metrics(o, &s.metrics);
            }),
            Event::Sample(s) => line("sample", h.ca_state, &mut |_, o| {
                o.field(k!("state"), tcp_state_name(h.tcp_state))
                    .field(k!("acks"), s.acks)
                    .field(k!("throughput_bps"), flow.throughput_bps)
                    .field(k!("retrans_coalesced"), s.retrans_coalesced);
                metrics(o, &s.metrics);
            }),
            Event::Retransmit(r) => line("retransmit", h.ca_state, &mut |_, o| {
                o.field(k!("segs"), r.segs)
                    .field(k!("retrans_total"), r.retrans_total)
                    .field(k!("cwnd"), r.cwnd)
                    .field(k!("ssthresh"), r.ssthresh);
            }),
            Event::CongState(c) => line("cong_state", c.to, &mut |_, o| {
                o.field(k!("from"), c.from)
                    .field(k!("to"), c.to)
                    .field(k!("cwnd"), c.cwnd)
                    .field(k!("ssthresh"), c.ssthresh);
            }),
        }
        self.buf = buf;
        self.write_if_full()
    }

    fn stats(&mut self, now_ns: u64, stats: &StatsReport) -> io::Result<()> {
        let rec = StatsRecord { ty: "stats", ts: self.clock.unix_secs(now_ns), stats };
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

    /// The serde-derived records this sink wrote before it wrote by hand: the reference the
    /// hand-written lines must equal byte for byte (field order, number and string formatting,
    /// escaping, nulls).
    mod reference {
        use serde::Serialize;

        use crate::{
            observe::clock::Clock,
            observe::event::{CaState, EndReason, Event, Metrics, tcp_state_name},
            observe::flow::{Change, Flow, FlowTable},
            sys::cgroup::CgroupNames,
        };

        #[derive(Serialize)]
        struct FlowRecord<'a> {
            #[serde(rename = "type")]
            ty: &'static str,
            ts: f64,
            cookie: u64,
            src: String,
            dst: String,
            cc: &'a str,
            ca_state: CaState,
            #[serde(flatten)]
            body: Body<'a>,
        }

        #[derive(Serialize, Default)]
        struct OwnerJson {
            side: Option<String>,
            pid: Option<u32>,
            comm: Option<crate::sys::name::Name>,
            cgroup: Option<String>,
            cgroup_id: Option<u64>,
            netns: Option<u32>,
            #[serde(skip_serializing_if = "Option::is_none")]
            arm: Option<&'static str>,
        }

        #[derive(Serialize)]
        struct CaSeconds {
            open: f64,
            disorder: f64,
            cwr: f64,
            recovery: f64,
            loss: f64,
        }

        #[derive(Serialize)]
        struct Summary<'a> {
            start_ts: Option<f64>,
            duration_s: f64,
            end: EndReason,
            #[serde(flatten)]
            owner: OwnerJson,
            ccs: &'a [crate::sys::name::Name],
            bbr_modes: &'a [std::sync::Arc<str>],
            bytes_sent: Option<u64>,
            bytes_acked: Option<u64>,
            bytes_received: Option<u64>,
            bytes_retrans: Option<u64>,
            segs_out: Option<u32>,
            segs_in: Option<u32>,
            data_segs_out: Option<u32>,
            data_segs_in: Option<u32>,
            retrans_total: Option<u32>,
            retrans_at_open: u32,
            retransmit_events: u64,
            retrans_coalesced: u32,
            retrans_failed: u32,
            srtt_first_us: u32,
            srtt_min_us: u32,
            srtt_median_us: Option<u32>,
            srtt_max_us: u32,
            srtt_last_us: Option<u32>,
            min_rtt_us: Option<u32>,
            cwnd_max: u32,
            ca_state_s: CaSeconds,
            goodput_bps: Option<u64>,
            delivery_rate_bps: Option<u64>,
            delivery_app_limited: Option<bool>,
            pacing_rate_bps: Option<u64>,
            bbr_bw_bps: Option<u64>,
            mss: Option<u32>,
            busy_us: Option<u64>,
            rwnd_limited_us: Option<u64>,
            sndbuf_limited_us: Option<u64>,
            samples: u32,
            rtt_events: u64,
            slow_path_acks: u32,
            send_events: u32,
        }

        #[derive(Serialize)]
        #[serde(untagged)]
        enum Body<'a> {
            Open {
                #[serde(flatten)]
                owner: OwnerJson,
            },
            Summary(Box<Summary<'a>>),
            Sample {
                state: Option<&'static str>,
                acks: u32,
                throughput_bps: Option<u64>,
                retrans_coalesced: u32,
                #[serde(flatten)]
                metrics: &'a Metrics,
            },
            Retransmit {
                segs: u32,
                retrans_total: u32,
                cwnd: u32,
                ssthresh: Option<u32>,
            },
            CongState {
                from: CaState,
                to: CaState,
                cwnd: u32,
                ssthresh: Option<u32>,
            },
            Close {
                duration_s: f64,
                goodput_bps: Option<u64>,
                retransmit_events: u64,
                retrans_coalesced: u32,
                #[serde(flatten)]
                metrics: &'a Metrics,
            },
        }

        fn owner(cgroups: &mut CgroupNames, flow: &Flow) -> OwnerJson {
            let Some(o) = &flow.life.owner else { return OwnerJson::default() };
            OwnerJson {
                side: o.side.map(str::to_owned),
                pid: o.pid,
                comm: o.comm,
                cgroup: o.cgroup_id.and_then(|id| cgroups.name(id)).map(str::to_owned),
                cgroup_id: o.cgroup_id,
                netns: o.netns,
                arm: o.arm.map(|a| if a == 1 { "a" } else { "b" }),
            }
        }

        fn summary<'a>(clock: &Clock, cgroups: &mut CgroupNames, flow: &'a Flow) -> Option<Summary<'a>> {
            let e = flow.life.end.as_ref()?;
            let m = flow.metrics.as_ref();
            let get = |f: fn(&Metrics) -> Option<u64>| m.and_then(f);
            let get32 = |f: fn(&Metrics) -> Option<u32>| m.and_then(f);
            let start = flow.life.start_ns.unwrap_or(flow.first_ns);
            let end_ns = e.head.ts_ns;
            let secs = |i: usize| flow.life.ca_ns[i] as f64 / 1e9;
            let duration_ns = end_ns.saturating_sub(start);
            let goodput_bps = match get(|m| m.bytes_acked) {
                Some(b) if duration_ns > 0 => {
                    Some((u128::from(b) * 8 * 1_000_000_000 / u128::from(duration_ns)) as u64)
                }
                _ => None,
            };
            Some(Summary {
                start_ts: flow.life.start_ns.map(|s| clock.unix_secs(s)),
                duration_s: duration_ns as f64 / 1e9,
                end: e.end,
                owner: owner(cgroups, flow),
                ccs: &flow.life.ccs,
                bbr_modes: &flow.life.bbr_modes,
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
                ca_state_s: CaSeconds {
                    open: secs(0),
                    disorder: secs(1),
                    cwr: secs(2),
                    recovery: secs(3),
                    loss: secs(4),
                },
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

        fn record<'a>(
            clock: &Clock,
            ty: &'static str,
            ts_ns: u64,
            flow: &'a Flow,
            state: CaState,
            body: Body<'a>,
        ) -> FlowRecord<'a> {
            FlowRecord {
                ty,
                ts: clock.unix_secs(ts_ns),
                cookie: flow.id,
                src: flow.src.to_string(),
                dst: flow.dst.to_string(),
                cc: &flow.cc,
                ca_state: state,
                body,
            }
        }

        /// What the serde-derived sink wrote for `ev`.
        pub(super) fn lines(
            clock: &Clock,
            cgroups: &mut CgroupNames,
            ev: &Event,
            change: Change,
            table: &FlowTable,
        ) -> String {
            let mut out = String::new();
            let mut line = |r: &FlowRecord| {
                out.push_str(&serde_json::to_string(r).unwrap());
                out.push('\n');
            };
            let h = ev.head();
            let Some(flow) = table.get(h.flow) else { return out };
            // A flow whose only record was its close: its summary alone.
            if change == Change::Opened && !flow.life.summary_only {
                let o = owner(cgroups, flow);
                line(&record(clock, "flow_open", flow.first_ns, flow, h.ca_state, Body::Open { owner: o }));
            }
            let rec = match ev {
                Event::Open(_) => return out,
                Event::End(_) => {
                    let Some(s) = summary(clock, cgroups, flow) else { return out };
                    record(clock, "flow_summary", h.ts_ns, flow, h.ca_state, Body::Summary(Box::new(s)))
                }
                Event::Sample(s) if s.closing && flow.life.summary_only => return out,
                Event::Sample(s) if s.closing => record(
                    clock,
                    "flow_close",
                    h.ts_ns,
                    flow,
                    h.ca_state,
                    Body::Close {
                        duration_s: flow.duration_ns() as f64 / 1e9,
                        goodput_bps: flow.mean_goodput_bps(),
                        retransmit_events: flow.retransmits,
                        retrans_coalesced: s.retrans_coalesced,
                        metrics: &s.metrics,
                    },
                ),
                Event::Sample(s) => record(
                    clock,
                    "sample",
                    h.ts_ns,
                    flow,
                    h.ca_state,
                    Body::Sample {
                        state: tcp_state_name(h.tcp_state),
                        acks: s.acks,
                        throughput_bps: flow.throughput_bps,
                        retrans_coalesced: s.retrans_coalesced,
                        metrics: &s.metrics,
                    },
                ),
                Event::Retransmit(r) => record(
                    clock,
                    "retransmit",
                    h.ts_ns,
                    flow,
                    h.ca_state,
                    Body::Retransmit {
                        segs: r.segs,
                        retrans_total: r.retrans_total,
                        cwnd: r.cwnd,
                        ssthresh: r.ssthresh,
                    },
                ),
                Event::CongState(c) => record(
                    clock,
                    "cong_state",
                    h.ts_ns,
                    flow,
                    c.to,
                    Body::CongState { from: c.from, to: c.to, cwnd: c.cwnd, ssthresh: c.ssthresh },
                ),
            };
            line(&rec);
            out
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

    /// The hand-written lines are exactly what serde's derived serializers wrote: every kind of
    /// record, every field in the same order, every value formatted and escaped the same way.
    #[test]
    fn lines_equal_the_serde_derived_records_byte_for_byte() {
        let names = || {
            [(10u64, "/"), (11, "/system.slice/a \"b\"\\c\n.service"), (12, "/ünï")]
                .into_iter()
                .map(|(i, n)| (i, n.to_string()))
        };
        let clock = Clock::with_offset(1_795_409_178_787_404_123);
        let mut out = Vec::new();
        let mut sink = JsonSink::new(&mut out, clock);
        sink.cgroups = CgroupNames::fixed(names());
        let mut cgroups = CgroupNames::fixed(names());
        let mut table = FlowTable::new(0);
        let mut expected = String::new();
        for ev in varied_events() {
            let change = table.apply(&ev);
            sink.event(&ev, change, &table).unwrap();
            expected.push_str(&reference::lines(&clock, &mut cgroups, &ev, change, &table));
        }
        sink.flush().unwrap();
        drop(sink);
        let got = String::from_utf8(out).unwrap();
        let types =
            |s: &str| s.lines().map(|l| l.split('"').nth(3).unwrap_or_default().to_string()).collect::<Vec<_>>();
        assert_eq!(types(&got), types(&expected));
        for (g, e) in got.lines().zip(expected.lines()) {
            assert_eq!(g, e);
        }
        assert_eq!(got, expected);
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
