//! Human units for the dashboard's cells: rates in [`crate::units`]' one rate unit (the charts
//! are in Mbit/s too), in its compact form; times likewise (`12.3ms`).

use ratatui::text::Span;

use crate::units::{fmt_rate_compact, fmt_us_compact};

pub(super) fn opt_bps(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), fmt_rate_compact)
}

/// A rate in bit/s in at most 5 characters, for narrow columns headed `BIT/S`: `925k`, `48.3M`,
/// `1.20G` (as btop and bottom shorten; never a unit cut in half).
pub(super) fn opt_bps_short(v: Option<u64>) -> String {
    let Some(v) = v.map(|b| b as f64) else { return "-".into() };
    // Thresholds just under each power, so that 999.7k reads 1.00M, not 1000k.
    let (scaled, prefix) = match v {
        v if v >= 999.5e6 => (v / 1e9, "G"),
        v if v >= 999.5e3 => (v / 1e6, "M"),
        v if v >= 999.5 => (v / 1e3, "k"),
        v => (v, ""),
    };
    match scaled {
        s if s >= 99.95 || prefix.is_empty() => format!("{s:.0}{prefix}"),
        s if s >= 9.995 => format!("{s:.1}{prefix}"),
        s => format!("{s:.2}{prefix}"),
    }
}

/// The parts of a line that fit in `width` columns, each whole or not at all, in their order: a
/// narrow terminal loses the parts that do not fit instead of showing one cut mid-number.
pub(super) fn fit(parts: Vec<Span<'static>>, width: usize) -> Vec<Span<'static>> {
    let mut left = width;
    parts
        .into_iter()
        .filter(|p| {
            let w = p.width();
            let fits = w <= left;
            if fits {
                left -= w;
            }
            fits
        })
        .collect()
}

/// What ends a line that [`fit_marked`] left parts out of.
pub(super) const CUT: &str = " · …";

/// As [`fit`], but when a part is left out the line ends in [`CUT`], so that a narrow terminal
/// says something is missing rather than hiding it (the help says a wider one shows it).
pub(super) fn fit_marked(parts: Vec<Span<'static>>, width: usize) -> Vec<Span<'static>> {
    if parts.iter().map(Span::width).sum::<usize>() <= width {
        return parts;
    }
    let mut kept = fit(parts, width.saturating_sub(CUT.chars().count()));
    kept.push(Span::raw(CUT));
    kept
}

pub(super) fn opt_ms(us: Option<u32>) -> String {
    us.map_or_else(|| "-".into(), fmt_us_compact)
}

pub(super) fn count(v: f64) -> String {
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
    fn short_rates_fit_five_columns() {
        assert_eq!(opt_bps_short(Some(925_000)), "925k");
        assert_eq!(opt_bps_short(Some(48_300_000)), "48.3M");
        assert_eq!(opt_bps_short(Some(4_900_000)), "4.90M");
        assert_eq!(opt_bps_short(Some(1_200_000_000)), "1.20G");
        assert_eq!(opt_bps_short(Some(99_960_000)), "100M");
        assert_eq!(opt_bps_short(Some(640)), "640");
        assert_eq!(opt_bps_short(Some(999_700)), "1.00M");
        assert_eq!(opt_bps_short(None), "-");
        for b in (0..40).map(|i| 10u64.pow(i / 4) * [1, 2, 5, 9][i as usize % 4]) {
            assert!(opt_bps_short(Some(b)).len() <= 5, "{b}: {}", opt_bps_short(Some(b)));
        }
    }

    #[test]
    fn fit_keeps_whole_parts_in_order() {
        let parts = || vec![Span::raw("cwnd 28"), Span::raw(" · pacing 14.2Mbit/s"), Span::raw(" · retr 9")];
        let text = |v: Vec<Span<'static>>| v.iter().map(|s| s.content.to_string()).collect::<String>();
        assert_eq!(text(fit(parts(), 80)), "cwnd 28 · pacing 14.2Mbit/s · retr 9");
        assert_eq!(text(fit(parts(), 20)), "cwnd 28 · retr 9", "the part that does not fit goes, whole");
        assert_eq!(text(fit(parts(), 3)), "");
        assert_eq!(text(fit_marked(parts(), 80)), "cwnd 28 · pacing 14.2Mbit/s · retr 9", "all fit: no mark");
        assert_eq!(text(fit_marked(parts(), 20)), "cwnd 28 · retr 9 · …", "a part left out is marked");
        assert_eq!(text(fit_marked(parts(), 3)), " · …");
    }

    #[test]
    fn units() {
        assert_eq!(count(12_345.0), "12.3k");
    }
}
