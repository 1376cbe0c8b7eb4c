//! Human units, parsed and formatted in one place for every command: rates with tc(8)'s units
//! (`50mbit`), times (`100ms`, `90s`, `10m`; a bare number is seconds wherever a run length is
//! asked for), loss (`1%`) and buffer sizes (bytes, `64KB`, `1000pkt`, `2bdp`). Errors are one
//! readable sentence each; the caller turns them into usage errors. Also the bands of minimum RTT
//! that `advise` and `experiment` group clients by, so both name a band the same way.

use std::time::Duration;

/// Bytes one "packet" of a `--buffer …pkt` size stands for: a full-sized IPv4 packet at the
/// emulated link's MTU.
pub(crate) const PACKET_BYTES: u64 = 1500;

/// Splits `"12.5mbit"` into `(12.5, "mbit")`; the unit is lower-cased and trimmed. A whole
/// number in exponent form (`1e300`) is a number, not `1` with the unit `e300`.
fn split(s: &str) -> Option<(f64, String)> {
    let s = s.trim();
    if let Ok(v) = s.parse::<f64>() {
        return v.is_finite().then(|| (v, String::new()));
    }
    let end = s.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+'))).unwrap_or(s.len());
    let value: f64 = s[..end].parse().ok()?;
    value.is_finite().then(|| (value, s[end..].trim().to_ascii_lowercase()))
}

/// How `--rate` reads its units, for error messages.
const RATE_UNITS: &str = "kbit, mbit, gbit (bits/s; also Mbit/s) or kbps, mbps, gbps (BYTES/s, as tc(8) reads them; \
                          also MB/s), e.g. 50mbit";

/// A rate as given on the command line: bits per second, and whether it was written in bytes
/// (`mbps`, `MB/s`), which the demo repeats back in bits so nobody is surprised by tc's reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub bps: u64,
    pub(crate) in_bytes: bool,
}

/// A rate with tc(8)'s units: `bit` suffixes are bits per second (`50mbit`, `50Mbit`, `1.5gbit`,
/// `800kbit`, IEC `kibit`/`mibit`/`gibit`), `bps` suffixes are BYTES per second (`50mbps` is
/// 50 MByte/s = 400 Mbit/s, as tc reads it; `KiBps` etc.), both case-insensitive as in tc. The
/// written-out forms `Mbit/s`, `Mb/s` (bits) and `MB/s`, `KB/s` (bytes) are read by the case of
/// their `b`. A unit is required: tc takes a bare number as bits per second, which for a link is
/// never what was meant; a size without "per second" (`50MB`, `50Mb`) is refused.
pub fn rate(s: &str) -> Result<Rate, String> {
    let bad = || format!("'{s}' is not a rate: use {RATE_UNITS}");
    let (v, _) = split(s).ok_or_else(bad)?;
    let raw = s.trim();
    let unit =
        raw[raw.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+'))).unwrap_or(raw.len())..].trim();
    if unit.is_empty() {
        return Err(format!("'{s}' needs a unit: {RATE_UNITS}"));
    }
    let prefix = |p: &str| -> Option<f64> {
        Some(match p.to_ascii_lowercase().as_str() {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            "g" => 1e9,
            "t" => 1e12,
            "ki" => 1024.0,
            "mi" => 1024.0 * 1024.0,
            "gi" => 1024.0 * 1024.0 * 1024.0,
            _ => return None,
        })
    };
    let lower = unit.to_ascii_lowercase();
    // (multiplier, bytes?)
    let (mult, in_bytes) = if let Some(p) = lower.strip_suffix("bit/s").or_else(|| lower.strip_suffix("bit")) {
        (prefix(p).ok_or_else(bad)?, false)
    } else if let Some(p) = lower.strip_suffix("bits/s").or_else(|| lower.strip_suffix("bits")) {
        (prefix(p).ok_or_else(bad)?, false)
    } else if let Some(p) = lower.strip_suffix("bps") {
        // tc(8): "bps" is bytes per second, whatever the case.
        (prefix(p).ok_or_else(bad)? * 8.0, true)
    } else if let Some(p) = unit.strip_suffix("B/s") {
        (prefix(p).ok_or_else(bad)? * 8.0, true)
    } else if let Some(p) = unit.strip_suffix("b/s") {
        (prefix(p).ok_or_else(bad)?, false)
    } else if unit.ends_with(['b', 'B']) && prefix(&unit[..unit.len() - 1]).is_some() {
        return Err(format!(
            "'{s}' is a size, not a rate: write {v}mbit for megabits/s or {v}mbps (megabytes/s, as tc(8) reads it)"
        ));
    } else {
        return Err(bad());
    };
    let bps = v * mult;
    if bps < 1.0 {
        return Err(format!("'{s}': the rate must be positive"));
    }
    if bps > 1e15 {
        return Err(format!("'{s}' is not a link rate"));
    }
    Ok(Rate { bps: bps.round() as u64, in_bytes })
}

/// A time with a unit: `us`, `ms`, `s`, `m`, `h` (`bare_unit` is used when there is none; `None`
/// makes a unit mandatory).
fn duration_with(s: &str, bare_unit: Option<&str>) -> Result<Duration, String> {
    let bad = || format!("'{s}' is not a time: use e.g. 100ms, 30s, 2m");
    let (v, unit) = split(s).ok_or_else(bad)?;
    // Before the unit: `0` would otherwise be told to become `0ms`, which is refused too.
    if v <= 0.0 {
        return Err(format!("'{s}' must be longer than zero, e.g. 100ms"));
    }
    let unit =
        if unit.is_empty() { bare_unit.ok_or_else(|| format!("'{s}' needs a unit, e.g. {s}ms"))? } else { &unit };
    let secs = match unit {
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" | "sec" | "secs" => v,
        "m" | "min" | "mins" => v * 60.0,
        "h" | "hour" | "hours" => v * 3600.0,
        _ => return Err(bad()),
    };
    if secs <= 0.0 {
        // A positive number so small it underflows.
        return Err(format!("'{s}' must be longer than zero, e.g. 100ms"));
    }
    if secs > LONGEST_S {
        return Err(format!("'{s}' must be at most a year"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// No time bbrscope is given is longer: beyond it the number is a typo.
const LONGEST_S: f64 = 365.0 * 86400.0;

/// A run length: a bare number is seconds; `90s`, `10m`, `2h`, `500ms` also; at most a year.
pub fn duration(s: &str) -> Result<Duration, String> {
    duration_with(s, Some("s"))
}

/// [`duration`], at most `max` (`max_words` says it in the error).
pub(crate) fn duration_up_to(s: &str, max: Duration, max_words: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d > max {
        return Err(format!("'{s}' must be at most {max_words}"));
    }
    Ok(d)
}

/// A round-trip time: `100ms`, `0.2s`, `500us`. A unit is required (a bare `100` is ambiguous).
pub fn rtt(s: &str) -> Result<Duration, String> {
    duration_with(s, None)
}

/// A loss probability: `1%`, `0.5%`, or a fraction `0.01`. From 0 up to, not including, 100%.
pub fn loss(s: &str) -> Result<f64, String> {
    let bad = || format!("'{s}' is not a loss rate: use e.g. 1%, 0.5% or 0.01");
    let (v, unit) = split(s).ok_or_else(bad)?;
    let p = match unit.as_str() {
        "%" => v / 100.0,
        "" => v,
        _ => return Err(bad()),
    };
    if p < 0.0 {
        return Err(format!("'{s}': loss cannot be negative"));
    }
    if p >= 1.0 {
        return Err(format!("'{s}': loss must be below 100% (a bare number is a fraction: 0.01 = 1%)"));
    }
    Ok(p)
}

/// A bottleneck buffer, before the link's bandwidth-delay product is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Buffer {
    Bytes(u64),
    /// Multiples of the bandwidth-delay product.
    Bdp(f64),
}

impl Buffer {
    pub(crate) fn bytes(self, bdp_bytes: f64) -> u64 {
        match self {
            Buffer::Bytes(b) => b,
            Buffer::Bdp(k) => (k * bdp_bytes).round() as u64,
        }
    }
}

/// `150000`, `64KB`, `1.5MB` (SI; `KiB`/`MiB` for binary), `1000pkt` (x 1500 B) or `2bdp`.
pub fn buffer(s: &str) -> Result<Buffer, String> {
    let bad = || format!("'{s}' is not a buffer size: use bytes (150000, 64KB), packets (1000pkt) or 2bdp");
    let (v, unit) = split(s).ok_or_else(bad)?;
    if v <= 0.0 {
        return Err(format!("'{s}': the buffer must be larger than zero"));
    }
    let bytes = match unit.as_str() {
        "bdp" | "xbdp" => return Ok(Buffer::Bdp(v)),
        "" | "b" | "byte" | "bytes" => v,
        "k" | "kb" => v * 1e3,
        "m" | "mb" => v * 1e6,
        "kib" => v * 1024.0,
        "mib" => v * 1024.0 * 1024.0,
        "p" | "pkt" | "pkts" | "packet" | "packets" => v * PACKET_BYTES as f64,
        _ => return Err(bad()),
    };
    Ok(Buffer::Bytes(bytes.round() as u64))
}

/// Formats bits per second for people, in tc(8)'s units with "/s" (ss's `Mbps` would read as
/// megabytes to tc users): `48.30 Mbit/s`, `812 kbit/s`. [`fmt_rate_compact`] is the same unit
/// for a table cell.
pub(crate) fn fmt_rate(bps: f64) -> String {
    match bps {
        b if b >= 1e9 => format!("{:.2} Gbit/s", b / 1e9),
        b if b >= 1e6 => format!("{:.2} Mbit/s", b / 1e6),
        b if b >= 1e3 => format!("{:.0} kbit/s", b / 1e3),
        b => format!("{b:.0} bit/s"),
    }
}

/// At most 10 characters, no space: `48.3Mbit/s`, `483Mbit/s`, `812kbit/s`.
pub(crate) fn fmt_rate_compact(bps: u64) -> String {
    let v = bps as f64;
    let (scaled, prefix) = match v {
        v if v >= 1e9 => (v / 1e9, "G"),
        v if v >= 1e6 => (v / 1e6, "M"),
        v if v >= 1e3 => (v / 1e3, "k"),
        v => (v, ""),
    };
    if scaled >= 100.0 || prefix.is_empty() {
        format!("{scaled:.0}{prefix}bit/s")
    } else {
        format!("{scaled:.1}{prefix}bit/s")
    }
}

/// Formats a byte count: `625 KB`, `1.50 MB`, `2.00 GB`.
pub(crate) fn fmt_bytes(b: f64) -> String {
    match b {
        b if b >= 1e9 => format!("{:.2} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.2} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.0} KB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

/// Formats microseconds as milliseconds: `103 ms`, `1.5 ms`.
pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 10_000.0 { format!("{:.0} ms", us / 1e3) } else { format!("{:.1} ms", us / 1e3) }
}

/// Microseconds for a table cell, no space, as [`fmt_rate_compact`] gives rates: `167ms`, `12.3ms`,
/// `4.50ms`, `45µs`.
pub(crate) fn fmt_us_compact(us: u32) -> String {
    match us {
        us if us < 1_000 => format!("{us}µs"),
        us if us >= 100_000 => format!("{:.0}ms", f64::from(us) / 1e3),
        us if us >= 10_000 => format!("{:.1}ms", f64::from(us) / 1e3),
        us => format!("{:.2}ms", f64::from(us) / 1e3),
    }
}

/// [`fmt_us`], and below a millisecond whole microseconds (`10 µs`): for RTTs a flow on a LAN or
/// loopback may have.
pub(crate) fn fmt_us_fine(us: u32) -> String {
    if us < 1_000 { format!("{us} µs") } else { fmt_us(f64::from(us)) }
}

/// The time of day of a Unix time, UTC: `17:57:54 UTC` (for a line that repeats through a day).
pub(crate) fn fmt_utc_time(unix_s: f64) -> String {
    let s = unix_s.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// The band of minimum RTT a flow is in: 0 unknown, then 1.. by the edges (ms).
pub(crate) fn band_of(min_rtt_us: Option<u32>, edges_ms: &[f64]) -> usize {
    min_rtt_us.map_or(0, |r| 1 + edges_ms.iter().filter(|&&e| f64::from(r) / 1e3 >= e).count())
}

/// A band's lower and upper edges (ms; `None`: open), or `None` for the band of unknown RTT.
pub(crate) fn band_edges(band: usize, edges_ms: &[f64]) -> Option<(Option<f64>, Option<f64>)> {
    let b = band.checked_sub(1)?;
    Some((b.checked_sub(1).map(|j| edges_ms[j]), edges_ms.get(b).copied()))
}

/// A band's name: `RTT <10 ms`, `RTT 10–50 ms`, `RTT ≥150 ms`, `RTT unknown`.
pub(crate) fn band_label(band: usize, edges_ms: &[f64]) -> String {
    let Some(edges) = band_edges(band, edges_ms) else { return "RTT unknown".into() };
    match edges {
        (None, Some(hi)) => format!("RTT <{hi} ms"),
        (Some(lo), Some(hi)) => format!("RTT {lo}–{hi} ms"),
        (Some(lo), None) => format!("RTT ≥{lo} ms"),
        (None, None) => "RTT any".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day_in_utc() {
        assert_eq!(fmt_utc_time(1_795_975_074.9), "17:57:54 UTC");
        assert_eq!(fmt_utc_time(0.0), "00:00:00 UTC");
    }

    #[test]
    fn rates_formatted() {
        assert_eq!(fmt_rate(48_300_000.0), "48.30 Mbit/s");
        assert_eq!(fmt_rate(812_000.0), "812 kbit/s");
        assert_eq!(fmt_rate_compact(48_300_000), "48.3Mbit/s");
        assert_eq!(fmt_rate_compact(483_000_000), "483Mbit/s");
        assert_eq!(fmt_rate_compact(1_200_000_000), "1.2Gbit/s");
        assert_eq!(fmt_rate_compact(812_000), "812kbit/s");
        assert_eq!(fmt_rate_compact(950), "950bit/s");
        assert!(fmt_rate_compact(999_949_999).len() <= 10);
        assert_eq!(fmt_bytes(2.5e9), "2.50 GB");
    }

    #[test]
    fn rates() {
        let bits = |s: &str| rate(s).map(|r| r.bps);
        assert_eq!(bits("50mbit"), Ok(50_000_000));
        assert_eq!(bits("50Mbit"), Ok(50_000_000));
        assert_eq!(bits("50MBIT"), Ok(50_000_000));
        assert_eq!(bits("50Mbit/s"), Ok(50_000_000));
        assert_eq!(bits("50Mb/s"), Ok(50_000_000));
        assert_eq!(bits("1.5gbit"), Ok(1_500_000_000));
        assert_eq!(bits("800kbit"), Ok(800_000));
        assert_eq!(bits("64000bit"), Ok(64_000));
        assert_eq!(bits("1mibit"), Ok(1_048_576));
        assert!(bits("0mbit").is_err());
        assert!(bits("-5mbit").is_err());
        assert!(bits("fast").is_err());
        assert!(bits("50 furlongs").is_err());
        assert!(bits("").is_err());
    }

    /// tc(8): "bps" is bytes per second, in any case; "MB/s" is bytes too.
    #[test]
    fn rates_in_bytes_follow_tc() {
        assert_eq!(rate("50mbps"), Ok(Rate { bps: 400_000_000, in_bytes: true }));
        assert_eq!(rate("50Mbps"), Ok(Rate { bps: 400_000_000, in_bytes: true }));
        assert_eq!(rate("50MBps"), Ok(Rate { bps: 400_000_000, in_bytes: true }));
        assert_eq!(rate("6.25MB/s"), Ok(Rate { bps: 50_000_000, in_bytes: true }));
        assert_eq!(rate("100kbps").map(|r| r.bps), Ok(800_000));
        assert_eq!(rate("1KiBps").map(|r| r.bps), Ok(8192));
        assert_eq!(rate("125000bps").map(|r| r.bps), Ok(1_000_000));
        assert_eq!(rate("50mbit").map(|r| r.in_bytes), Ok(false));
    }

    #[test]
    fn rates_without_a_rate_unit_are_refused() {
        for s in ["50MB", "50mb", "50Mb", "50kB"] {
            let e = rate(s).unwrap_err();
            assert!(e.contains("size, not a rate") && e.contains("mbit") && e.contains("mbps"), "{s}: {e}");
        }
        let e = rate("50").unwrap_err();
        assert!(e.contains("needs a unit") && e.contains("mbit") && e.contains("BYTES"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(duration("0").is_err());
        assert!(duration("-1s").is_err());
        assert!(duration("soon").is_err());
        assert!(duration("3 fortnights").is_err());
    }

    #[test]
    fn rtts_need_a_unit() {
        assert_eq!(rtt("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(rtt("0.167s"), Ok(Duration::from_millis(167)));
        assert_eq!(rtt("500us"), Ok(Duration::from_micros(500)));
        assert!(rtt("100").unwrap_err().contains("unit"));
        assert!(rtt("0ms").is_err());
        // A zero is told what would be right, not to add a unit to it (`0ms` is refused too).
        let e = rtt("0").unwrap_err();
        assert!(e.contains("longer than zero") && !e.contains("e.g. 0ms"), "{e}");
    }

    #[test]
    fn losses() {
        assert_eq!(loss("1%"), Ok(0.01));
        assert_eq!(loss("0.5%"), Ok(0.005));
        assert_eq!(loss("0.1"), Ok(0.1));
        assert_eq!(loss("0"), Ok(0.0));
        assert!(loss("-1%").is_err());
        assert!(loss("100%").is_err());
        assert!(loss("150%").is_err());
        assert!(loss("1").is_err());
        assert!(loss("lots").is_err());
    }

    #[test]
    fn buffers() {
        assert_eq!(buffer("150000"), Ok(Buffer::Bytes(150_000)));
        assert_eq!(buffer("64KB"), Ok(Buffer::Bytes(64_000)));
        assert_eq!(buffer("64KiB"), Ok(Buffer::Bytes(65_536)));
        assert_eq!(buffer("1.5MB"), Ok(Buffer::Bytes(1_500_000)));
        assert_eq!(buffer("1000pkt"), Ok(Buffer::Bytes(1_500_000)));
        assert_eq!(buffer("2bdp"), Ok(Buffer::Bdp(2.0)));
        assert_eq!(buffer("0.5BDP"), Ok(Buffer::Bdp(0.5)));
        assert_eq!(Buffer::Bdp(2.0).bytes(625_000.0), 1_250_000);
        assert!(buffer("0").is_err());
        assert!(buffer("-3bdp").is_err());
        assert!(buffer("big").is_err());
    }

    #[test]
    fn rtt_bands() {
        let edges = [10.0, 50.0, 150.0];
        let label = |rtt_us: Option<u32>| band_label(band_of(rtt_us, &edges), &edges);
        assert_eq!(label(None), "RTT unknown");
        assert_eq!(label(Some(9_999)), "RTT <10 ms");
        assert_eq!(label(Some(10_000)), "RTT 10–50 ms");
        assert_eq!(label(Some(149_000)), "RTT 50–150 ms");
        assert_eq!(label(Some(150_000)), "RTT ≥150 ms");
        assert_eq!(band_label(1, &[]), "RTT any");
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_rate(48.3e6), "48.30 Mbit/s");
        assert_eq!(fmt_rate(812e3), "812 kbit/s");
        assert_eq!(fmt_bytes(625_000.0), "625 KB");
        assert_eq!(fmt_us(103_200.0), "103 ms");
        assert_eq!(fmt_us(1_500.0), "1.5 ms");
        assert_eq!(fmt_us_fine(10), "10 µs");
        assert_eq!(fmt_us_fine(7_700), "7.7 ms");
        assert_eq!(fmt_us_fine(9_999), "10.0 ms");
        assert_eq!(fmt_us_fine(167_000), "167 ms");
        assert_eq!(fmt_us_compact(167_000), "167ms");
        assert_eq!(fmt_us_compact(12_340), "12.3ms");
        assert_eq!(fmt_us_compact(45), "45µs");
        assert_eq!(fmt_us_compact(4_500), "4.50ms");
    }
}
