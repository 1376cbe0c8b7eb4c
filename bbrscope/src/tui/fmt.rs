//! Human units for the dashboard: rates in bits per second as tc prints them (`Mbit`, with
//! "/s"), the one rate unit on every screen (ss's "Mbps" would read as megabytes to tc users, and
//! the charts are in Mbit/s); times in ms or µs.

/// At most 10 characters: `48.3Mbit/s`, `483Mbit/s`, `812kbit/s`.
pub fn bps(v: u64) -> String {
    let v = v as f64;
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

pub fn opt_bps(v: Option<u64>) -> String {
    v.map(bps).unwrap_or_else(|| "-".into())
}

pub fn ms(us: u32) -> String {
    match us {
        us if us < 1_000 => format!("{us}µs"),
        us if us >= 100_000 => format!("{:.0}ms", us as f64 / 1e3),
        us if us >= 10_000 => format!("{:.1}ms", us as f64 / 1e3),
        us => format!("{:.2}ms", us as f64 / 1e3),
    }
}

pub fn opt_ms(us: Option<u32>) -> String {
    us.map(ms).unwrap_or_else(|| "-".into())
}

pub fn count(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bps(48_300_000), "48.3Mbit/s");
        assert_eq!(bps(483_000_000), "483Mbit/s");
        assert_eq!(bps(1_200_000_000), "1.2Gbit/s");
        assert_eq!(bps(812_000), "812kbit/s");
        assert_eq!(bps(950), "950bit/s");
        assert!(bps(999_949_999).len() <= 10);
        assert_eq!(ms(167_000), "167ms");
        assert_eq!(ms(12_340), "12.3ms");
        assert_eq!(ms(45), "45µs");
        assert_eq!(ms(4_500), "4.50ms");
        assert_eq!(count(12_345.0), "12.3k");
    }
}
