//! Human units for the dashboard, as `ss` prints them (bits per second, ms).

pub fn bps(v: u64) -> String {
    let v = v as f64;
    match v {
        v if v >= 1e9 => format!("{:.1}Gbps", v / 1e9),
        v if v >= 1e6 => format!("{:.1}Mbps", v / 1e6),
        v if v >= 1e3 => format!("{:.0}Kbps", v / 1e3),
        v => format!("{v:.0}bps"),
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
        assert_eq!(bps(48_300_000), "48.3Mbps");
        assert_eq!(bps(1_200_000_000), "1.2Gbps");
        assert_eq!(bps(950), "950bps");
        assert_eq!(ms(167_000), "167ms");
        assert_eq!(ms(12_340), "12.3ms");
        assert_eq!(ms(45), "45µs");
        assert_eq!(ms(4_500), "4.50ms");
        assert_eq!(count(12_345.0), "12.3k");
    }
}
