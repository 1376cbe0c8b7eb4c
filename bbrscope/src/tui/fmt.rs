//! Human units for the dashboard's cells: rates in [`crate::units`]' one rate unit (the charts
//! are in Mbit/s too), in its compact form; times in ms or µs.

use crate::units::fmt_rate_compact;

pub fn opt_bps(v: Option<u64>) -> String {
    v.map(fmt_rate_compact).unwrap_or_else(|| "-".into())
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
        assert_eq!(ms(167_000), "167ms");
        assert_eq!(ms(12_340), "12.3ms");
        assert_eq!(ms(45), "45µs");
        assert_eq!(ms(4_500), "4.50ms");
        assert_eq!(count(12_345.0), "12.3k");
    }
}
