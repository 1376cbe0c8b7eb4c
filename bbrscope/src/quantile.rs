//! Quantiles, written once. Three definitions, each where it belongs:
//!
//! - [`nearest_rank`]: a value that occurred, for what is reported of measurements (the demo's
//!   percentiles, the dashboard's axes);
//! - [`type7`]: linear between order statistics (R's and numpy's default), for the experiment's
//!   statistics, whose bootstrap and reference values are computed that way;
//! - [`over_time`]: for a level sampled at uneven times (each sample holds until the next).
//!
//! and [`upper_median`] of integers, for the dashboard's verdicts.

/// Nearest-rank quantile (`q` in 0..=1) of unsorted values; `None` when there are none.
pub(crate) fn nearest_rank(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// The quantile `q` of sorted, non-empty data, linear between order statistics ("type 7").
pub(crate) fn type7(sorted: &[f64], q: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let frac = h - lo as f64;
    match sorted.get(lo + 1) {
        Some(&next) if frac > 0.0 => sorted[lo] + frac * (next - sorted[lo]),
        _ => sorted[lo],
    }
}

/// Quantile over time of a sampled level, from (time, value) samples in time order: each sample
/// holds until the next one (the last until `end`), so the answer is the value in force for a
/// fraction `q` of the time. The observer samples once per round trip, so counting samples
/// instead would over-weight the short-RTT moments: a CUBIC flow with a 1 s queue gives one
/// sample a second against 25 a second before the queue grew. Samples spanning no time at all
/// fall back to [`nearest_rank`].
pub(crate) fn over_time(samples: &[(u64, f64)], end: u64, q: f64) -> Option<f64> {
    let mut held: Vec<(f64, u64)> = samples
        .iter()
        .zip(samples.iter().skip(1).map(|s| s.0).chain([end]))
        .map(|(&(at, v), next)| (v, next.saturating_sub(at)))
        .collect();
    let total: u64 = held.iter().map(|h| h.1).sum();
    if total == 0 {
        return nearest_rank(&samples.iter().map(|s| s.1).collect::<Vec<_>>(), q);
    }
    held.sort_by(|a, b| a.0.total_cmp(&b.0));
    let need = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    held.into_iter()
        .find(|h| {
            seen += h.1;
            seen >= need
        })
        .map(|h| h.0)
}

/// The middle value, the upper of the two middle ones for an even count; `None` when empty.
pub(crate) fn upper_median<T: Ord + Copy>(mut v: Vec<T>) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_is_a_value_that_occurred() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(50.0));
        assert_eq!(nearest_rank(&v, 0.95), Some(95.0));
        assert_eq!(nearest_rank(&v, 0.0), Some(1.0));
        assert_eq!(nearest_rank(&[], 0.5), None);
        assert_eq!(nearest_rank(&[3.0, 1.0, 2.0], 0.5), Some(2.0));
    }

    /// Reference: numpy.quantile(x, q) (its default, linear, is R's type 7).
    #[test]
    fn type7_is_numpys_default() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(type7(&x, 0.5), 2.5);
        assert_eq!(type7(&x, 0.0), 1.0);
        assert_eq!(type7(&x, 1.0), 4.0);
        assert!((type7(&x, 0.95) - 3.85).abs() < 1e-12);
        assert_eq!(type7(&[7.0], 0.99), 7.0);
    }

    #[test]
    fn over_time_weighs_each_level_by_how_long_it_held() {
        // 10 samples of 40 ms in the first second, then one 1 s reading held for 3 s: by samples
        // the median is 40 ms, by time 1 s.
        let mut s: Vec<(u64, f64)> = (0..10).map(|i| (i * 100_000_000, 40_000.0)).collect();
        s.push((1_000_000_000, 1_000_000.0));
        assert_eq!(over_time(&s, 4_000_000_000, 0.5), Some(1_000_000.0));
        assert_eq!(over_time(&s, 4_000_000_000, 0.2), Some(40_000.0));
        assert_eq!(nearest_rank(&s.iter().map(|x| x.1).collect::<Vec<_>>(), 0.5), Some(40_000.0));
        // Equal spacing is the nearest-rank quantile; no time at all falls back to it.
        let even: Vec<(u64, f64)> = [3.0, 1.0, 2.0, 4.0].iter().enumerate().map(|(i, &v)| (i as u64, v)).collect();
        assert_eq!(over_time(&even, 4, 0.5), Some(2.0));
        assert_eq!(over_time(&[(5, 7.0), (5, 9.0)], 5, 0.5), Some(7.0));
        assert_eq!(over_time(&[], 5, 0.5), None);
    }

    #[test]
    fn upper_median_takes_the_upper_middle() {
        assert_eq!(upper_median(vec![3u32, 1, 2]), Some(2));
        assert_eq!(upper_median(vec![4u32, 1, 3, 2]), Some(3));
        assert_eq!(upper_median(Vec::<u32>::new()), None);
    }
}
