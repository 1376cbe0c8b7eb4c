//! How the experiment writes numbers for people: percentages with a real minus sign, counts with
//! thousands separators, times and rates in their units, text clipped to a width. One
//! place, so that the report, the conclusions, the dashboard and the figure write them alike.

use super::stats::{Diff, DiffUnit};
use crate::units;

/// An algorithm's name as people write it: `BBR`, `CUBIC`, `RENO`.
pub(crate) fn shout(cc: &str) -> String {
    cc.to_uppercase()
}

/// A change per response: `−2.6 s`, `+31 ms`.
pub(crate) fn fmt_signed_ms(ms: f64) -> String {
    let sign = if ms < 0.0 { "−" } else { "+" };
    format!("{sign}{}", fmt_seconds(ms.abs() / 1e3))
}

/// A number without trailing zeros: `5`, `2.5`.
pub(crate) fn fmt_num(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A time span for people: `40 s`, `12 min`, `3.5 h`.
pub(crate) fn fmt_span(secs: f64) -> String {
    match secs {
        s if s < 90.0 => format!("{s:.0} s"),
        s if s < 5400.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

pub(crate) fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).chain(['…']).collect() }
}

/// A log ratio as a change in %: ln(1.2) → +20.
pub(crate) fn pct_of_log(log_ratio: f64) -> f64 {
    log_ratio.exp_m1() * 100.0
}

/// A signed percentage with a real minus sign: `−38%`, `+1.2%` (one decimal below 10, two
/// below 0.1, so that a bound just above zero never reads as zero).
pub(crate) fn fmt_pct(x: f64) -> String {
    let sign = if x < 0.0 { "−" } else { "+" };
    let m = x.abs();
    if m >= 9.95 {
        format!("{sign}{m:.0}%")
    } else if m >= 0.095 || m == 0.0 {
        format!("{sign}{m:.1}%")
    } else {
        format!("{sign}{m:.2}%")
    }
}

fn fmt_points(x: f64) -> String {
    let sign = if x < 0.0 { "−" } else { "+" };
    let m = x.abs();
    if m >= 0.995 { format!("{sign}{m:.1} pp") } else { format!("{sign}{m:.2} pp") }
}

pub(crate) fn fmt_diff(d: &Diff) -> String {
    match d.unit {
        DiffUnit::RelativePct => fmt_pct(d.estimate),
        DiffUnit::Points => fmt_points(d.estimate),
    }
}

/// `[−45%, −30%]`.
pub(crate) fn fmt_interval(d: &Diff) -> String {
    match d.unit {
        DiffUnit::RelativePct => format!("[{}, {}]", fmt_pct(d.low), fmt_pct(d.high)),
        DiffUnit::Points => format!("[{}, {}]", fmt_points(d.low), fmt_points(d.high)),
    }
}

pub(crate) fn fmt_p(p: f64) -> String {
    if p < 0.001 { "<0.001".into() } else { format!("{p:.3}") }
}

/// `1,204`.
pub(crate) fn fmt_count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn fmt_bytes(b: u64) -> String {
    units::fmt_bytes(b as f64)
}

/// A metric's value in its unit, for people.
pub(crate) fn fmt_value(v: f64, unit: &str) -> String {
    match unit {
        "s" => fmt_seconds(v),
        "us" => fmt_seconds(v / 1e6),
        "bit/s" => units::fmt_rate(v),
        "ratio" => format!("{v:.2}x"),
        "share" => format!("{:.2}%", v * 100.0),
        _ => format!("{v}"),
    }
}

pub(crate) fn fmt_seconds(s: f64) -> String {
    match s {
        x if x >= 10.0 => format!("{x:.1} s"),
        x if x >= 1.0 => format!("{x:.2} s"),
        x if x >= 0.01 => format!("{:.0} ms", x * 1e3),
        x if x >= 0.001 => format!("{:.1} ms", x * 1e3),
        x => format!("{:.0} µs", x * 1e6),
    }
}

/// `p95` for the quantile 0.95.
pub(crate) fn quantile_name(q: f64) -> String {
    format!("p{}", (q * 100.0).round())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(fmt_pct(-38.2), "−38%");
        assert_eq!(fmt_pct(1.23), "+1.2%");
        assert_eq!(fmt_pct(0.04), "+0.04%");
        assert_eq!(fmt_count(1204), "1,204");
        assert_eq!(fmt_count(1_234_567), "1,234,567");
        assert_eq!(fmt_count(12), "12");
        assert_eq!(fmt_value(0.0123, "s"), "12 ms");
        assert_eq!(fmt_value(150_000.0, "us"), "150 ms");
        assert_eq!(fmt_value(0.0052, "share"), "0.52%");
        assert_eq!(fmt_num(5.0), "5");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_signed_ms(-2600.0), "−2.60 s");
    }
}
