//! Parsing the demo's human units: rates (`50mbit`), times (`100ms`, `30s`, `2m`), loss (`1%`)
//! and buffer sizes (bytes, `64KB`, `1000pkt`, `2bdp`). Errors are one readable sentence each;
//! the caller turns them into usage errors.

use std::time::Duration;

/// Bytes one "packet" of a `--buffer …pkt` size stands for: a full-sized IPv4 packet at the
/// emulated link's MTU.
pub const PACKET_BYTES: u64 = 1500;

/// Splits `"12.5mbit"` into `(12.5, "mbit")`; the unit is lower-cased and trimmed.
fn split(s: &str) -> Option<(f64, String)> {
    let s = s.trim();
    let end = s.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+'))).unwrap_or(s.len());
    let value: f64 = s[..end].parse().ok()?;
    value.is_finite().then(|| (value, s[end..].trim().to_ascii_lowercase()))
}

/// A bit rate: `50mbit`, `50Mbit/s`, `50mbps`, `1.5gbit`, `800kbit` or plain bits per second.
/// SI multiples (1 Mbit = 10^6 bit). Must be positive.
pub fn rate_bps(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not a rate: use e.g. 50mbit, 800kbit, 1gbit");
    let (v, unit) = split(s).ok_or_else(bad)?;
    let unit = unit.strip_suffix("/s").or_else(|| unit.strip_suffix("ps")).unwrap_or(&unit);
    let mult = match unit {
        "" | "bit" | "b" => 1.0,
        "k" | "kbit" | "kb" => 1e3,
        "m" | "mbit" | "mb" => 1e6,
        "g" | "gbit" | "gb" => 1e9,
        _ => return Err(bad()),
    };
    let bps = v * mult;
    if bps < 1.0 {
        return Err(format!("'{s}': the rate must be positive"));
    }
    Ok(bps.round() as u64)
}

/// A time with a unit: `us`, `ms`, `s`, `m`, `h` (`bare_unit` is used when there is none; `None`
/// makes a unit mandatory).
fn duration_with(s: &str, bare_unit: Option<&str>) -> Result<Duration, String> {
    let bad = || format!("'{s}' is not a time: use e.g. 100ms, 30s, 2m");
    let (v, unit) = split(s).ok_or_else(bad)?;
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
        return Err(format!("'{s}' must be longer than zero"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A run length: a bare number is seconds; `30s`, `2m`, `1h` also.
pub fn duration(s: &str) -> Result<Duration, String> {
    duration_with(s, Some("s"))
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
    pub fn bytes(self, bdp_bytes: f64) -> u64 {
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

/// Formats bits per second for people: `48.3 Mbit/s`, `812 kbit/s`.
pub fn fmt_rate(bps: f64) -> String {
    match bps {
        b if b >= 1e9 => format!("{:.2} Gbit/s", b / 1e9),
        b if b >= 1e6 => format!("{:.2} Mbit/s", b / 1e6),
        b if b >= 1e3 => format!("{:.0} kbit/s", b / 1e3),
        b => format!("{b:.0} bit/s"),
    }
}

/// Formats a byte count: `625 KB`, `1.50 MB`.
pub fn fmt_bytes(b: f64) -> String {
    match b {
        b if b >= 1e6 => format!("{:.2} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.0} KB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

/// Formats microseconds as milliseconds: `103.2 ms`.
pub fn fmt_us(us: f64) -> String {
    if us >= 10_000.0 { format!("{:.0} ms", us / 1e3) } else { format!("{:.1} ms", us / 1e3) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(rate_bps("50mbit"), Ok(50_000_000));
        assert_eq!(rate_bps("50Mbit/s"), Ok(50_000_000));
        assert_eq!(rate_bps("50mbps"), Ok(50_000_000));
        assert_eq!(rate_bps("1.5gbit"), Ok(1_500_000_000));
        assert_eq!(rate_bps("800kbit"), Ok(800_000));
        assert_eq!(rate_bps("64000"), Ok(64_000));
        assert!(rate_bps("0mbit").is_err());
        assert!(rate_bps("-5mbit").is_err());
        assert!(rate_bps("fast").is_err());
        assert!(rate_bps("50 furlongs").is_err());
        assert!(rate_bps("").is_err());
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
    fn formatting() {
        assert_eq!(fmt_rate(48.3e6), "48.30 Mbit/s");
        assert_eq!(fmt_rate(812e3), "812 kbit/s");
        assert_eq!(fmt_bytes(625_000.0), "625 KB");
        assert_eq!(fmt_us(103_200.0), "103 ms");
        assert_eq!(fmt_us(1_500.0), "1.5 ms");
    }
}
