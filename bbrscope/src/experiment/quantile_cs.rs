//! Always-valid confidence sequences for a quantile of an arm's completion times, and for the
//! ratio of two arms' quantiles: what "B's p95 is 20% lower" needs to be claimed at every look.
//! Pure: sorted times in, bounds out.
//!
//! The construction is Howard & Ramdas' for a fixed quantile ("Sequential estimation of
//! quantiles with applications to A/B-testing and best-arm identification", Bernoulli 2022,
//! section 3): for the true p-quantile `q`, the count of observations at or below `q` minus `p·t`
//! is a martingale whose increments lie in `[−p, 1−p]`, sub-Bernoulli with variance `p(1−p)` per
//! observation. A uniform boundary `b(v)` on such a process, crossed with probability at most
//! `α/2` on each side over all time, gives at every `t` at once
//! `X₍⌈pt − b_lo⌉₎ ≤ q ≤ X₍⌊pt + b_hi⌋+1₎` (order statistics; outside 1..t, no bound). The
//! boundary is the polynomial stitching of Howard, Ramdas, McAuliffe & Sekhon ("Time-uniform,
//! nonparametric, nonasymptotic confidence sequences", Annals of Statistics 2021, Theorem 1) with
//! their defaults `s = 1.4`, `η = 2`, for a sub-gamma process of scale `c`: sub-Bernoulli with
//! range `[−g, h]` is sub-gamma with `c = (h − g)/3`, and a negative `c` may be taken as 0
//! (sub-Gaussian). The lower side (`g = 1−p`, `h = p`) is the wider for a tail quantile.
//!
//! Two arms: each arm's sequence at `α/2`, so that both hold together with probability `1 − α`
//! at every look, and the log ratio `ln q_B − ln q_A` lies between `ln lo_B − ln hi_A` and
//! `ln hi_B − ln lo_A`. No assumption on the times' distribution; the flows of an arm are taken
//! as independent draws (per-connection assignment; blocks or clients of other designs are not).

use super::decide::MIN_CELL;

/// ζ(1.4), the Riemann zeta function at the stitching's `s` (checked against its series in the
/// tests).
const ZETA_S: f64 = 3.105_547_277_977_55;
const S: f64 = 1.4;
const ETA: f64 = 2.0;
/// The stitching starts at this many observations (`v_min = p(1−p)·T_MIN`): no bound is
/// claimed before [`MIN_CELL`] flows anyway, and a later start would widen every bound after it.
const T_MIN: f64 = 10.0;
const _: () = assert!(T_MIN as usize <= MIN_CELL);

/// The polynomial-stitching boundary at intrinsic time `v` for a sub-gamma process of scale
/// `c`, crossed with probability at most `alpha` over all `v` (for `v` below `v_min`, the bound
/// at `v_min`).
pub(crate) fn stitching(v: f64, c: f64, alpha: f64, v_min: f64) -> f64 {
    let k1 = (ETA.powf(0.25) + ETA.powf(-0.25)) / 2f64.sqrt();
    let k2 = f64::midpoint(ETA.sqrt(), 1.0);
    let v = v.max(v_min);
    let ell = S * (ETA * v / v_min).ln().ln() + (ZETA_S / (alpha * ETA.ln().powf(S))).ln();
    let term2 = k2 * c * ell;
    (k1 * k1 * v * ell + term2 * term2).sqrt() + term2
}

/// Bounds on the `p`-quantile of the distribution `sorted` (ascending) was drawn from, valid at
/// every sample size at once with probability `1 − alpha`: `(lower, upper)`, each `None` where
/// the observations bound nothing on that side. With `n` other than `sorted.len()`, the bounds
/// as they would be with `n` observations distributed as `sorted` are (the order statistic of
/// rank k among n taken at the sample's same share, k/n): what more flows would bound if the
/// arms kept their distributions.
fn scaled_bounds(sorted: &[f64], n: usize, p: f64, alpha: f64) -> (Option<f64>, Option<f64>) {
    let (lo, hi) = ranks(n, p, alpha);
    let at = |k: Option<usize>| {
        k.map(|k| sorted[((k as f64 * sorted.len() as f64 / n as f64).ceil() as usize).clamp(1, sorted.len()) - 1])
    };
    (at(lo), at(hi))
}

/// The ranks (from 1) of the order statistics that bound the `p`-quantile among `n`
/// observations ([`scaled_bounds`]), each `None` outside 1..=n.
fn ranks(n: usize, p: f64, alpha: f64) -> (Option<usize>, Option<usize>) {
    let t = n as f64;
    let v = p * (1.0 - p) * t;
    let v_min = p * (1.0 - p) * T_MIN;
    let below = stitching(v, ((2.0 * p - 1.0) / 3.0).max(0.0), alpha / 2.0, v_min);
    let above = stitching(v, ((1.0 - 2.0 * p) / 3.0).max(0.0), alpha / 2.0, v_min);
    let rank = |k: f64| (k >= 1.0 && k <= t).then_some(k as usize);
    (rank((p * t - below).ceil()), rank((p * t + above).floor() + 1.0))
}

/// The flows an arm needs before its `p`-quantile is bounded on both sides at `level` (the
/// ratio's: each arm at half of `1 − level`), at least [`MIN_CELL`].
pub(crate) fn flows_to_bound(p: f64, level: f64) -> usize {
    let bounded = |n: u64| {
        let (lo, hi) = ranks(n as usize, p, (1.0 - level) / 2.0);
        lo.is_some() && hi.is_some()
    };
    // Bounded is monotone in the count (the boundary grows slower than the count).
    super::stats::first_where(MIN_CELL as u64, 1 << 24, bounded).unwrap_or(1 << 24) as usize
}

/// The ratio of arm B's `p`-quantile to arm A's, in logs: `[estimate, low, high]`, the interval
/// valid at every look at once with probability `1 − alpha`; `None` until both arms' quantiles
/// are bounded on both sides. The estimate is the ratio of the nearest-rank quantiles.
pub(crate) fn log_ratio(a: &[f64], b: &[f64], p: f64, alpha: f64) -> Option<[f64; 3]> {
    scaled_log_ratio(a, b, p, alpha, 1.0)
}

/// [`log_ratio`] with each arm's count times `scale`, its distribution kept.
pub(crate) fn scaled_log_ratio(a: &[f64], b: &[f64], p: f64, alpha: f64, scale: f64) -> Option<[f64; 3]> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let [(a_lo, a_hi), (b_lo, b_hi)] =
        [a, b].map(|s| scaled_bounds(s, (s.len() as f64 * scale).round() as usize, p, alpha / 2.0));
    let (a_lo, a_hi, b_lo, b_hi) = (a_lo?, a_hi?, b_lo?, b_hi?);
    if a_lo <= 0.0 || b_lo <= 0.0 {
        return None;
    }
    let nearest = |s: &[f64]| crate::quantile::nearest_rank(s, p);
    let estimate = nearest(b)?.ln() - nearest(a)?.ln();
    Some([estimate, b_lo.ln() - a_hi.ln(), b_hi.ln() - a_lo.ln()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The bounds on the quantile of the sample's own count.
    fn bounds(sorted: &[f64], p: f64, alpha: f64) -> (Option<f64>, Option<f64>) {
        scaled_bounds(sorted, sorted.len(), p, alpha)
    }

    /// ζ(1.4) from its series: the partial sum to N plus the Euler–Maclaurin tail.
    #[test]
    fn zeta_is_the_series_value() {
        let n = 10_000.0f64;
        let partial: f64 = (1..10_000u32).map(|k| f64::from(k).powf(-S)).sum();
        let tail = n.powf(1.0 - S) / (S - 1.0) + 0.5 * n.powf(-S) + S / 12.0 * n.powf(-S - 1.0);
        assert!((partial + tail - ZETA_S).abs() < 1e-9, "{}", partial + tail);
    }

    /// The boundary with c = 0 against the closed form Howard et al. give for these defaults
    /// (their equation (11)): `1.7 sqrt(v (log log(2v/m) + 0.72 log(5.2/α)))`, within its rounding.
    #[test]
    fn the_boundary_is_the_published_one() {
        for (v, alpha) in [(10.0, 0.05), (1e3, 0.01), (1e5, 0.001), (47.5, 0.002)] {
            let m = 1.0;
            let ours = stitching(v, 0.0, alpha, m);
            let paper = 1.7 * (v * ((2.0 * v / m).ln().ln() + 0.72 * (5.2 / alpha).ln())).sqrt();
            assert!((ours / paper - 1.0).abs() < 0.01, "v {v} α {alpha}: {ours} vs {paper}");
        }
        // A positive scale only widens it.
        assert!(stitching(100.0, 0.3, 0.05, 1.0) > stitching(100.0, 0.0, 0.05, 1.0));
    }

    fn lognormal(rng: &mut Rng, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| scale * (0.8 * rng.normal()).exp()).collect()
    }

    /// Coverage at every look: 400 runs of 2,000 lognormal draws, a look every 10 draws; the
    /// true p95 (exp(0.8·1.645)) outside the bounds at any look in at most α of the runs.
    #[test]
    fn a_quantiles_bounds_hold_at_every_look() {
        let (p, alpha) = (0.95, 0.1);
        let truth = (0.8 * crate::experiment::stats::normal_quantile(p)).exp();
        let mut rng = Rng::new(5);
        let runs = 400usize;
        let mut missed = 0;
        for _ in 0..runs {
            let draws = lognormal(&mut rng, 2_000, 1.0);
            let mut sorted = Vec::new();
            let mut miss = false;
            for (i, x) in draws.into_iter().enumerate() {
                let at = sorted.partition_point(|&y| y < x);
                sorted.insert(at, x);
                if (i + 1) % 10 == 0 {
                    let (lo, hi) = bounds(&sorted, p, alpha);
                    miss |= lo.is_some_and(|l| l > truth) || hi.is_some_and(|h| h < truth);
                }
            }
            missed += usize::from(miss);
        }
        crate::output::errln!("p95 bounds, 200 looks: missed in {missed}/{runs} runs at α {alpha}");
        assert!(missed as f64 / runs as f64 <= alpha, "{missed}/{runs}");
        // Bounded on both sides from a few hundred draws, and narrowing.
        let sorted = |n| {
            let mut s = lognormal(&mut Rng::new(9), n, 1.0);
            s.sort_by(f64::total_cmp);
            s
        };
        let width = |n| {
            let (lo, hi) = bounds(&sorted(n), p, 0.05);
            hi.zip(lo).map(|(h, l)| (h / l).ln())
        };
        assert_eq!(width(50), None);
        let (w1, w2) = (width(1_000).unwrap(), width(10_000).unwrap());
        assert!(w2 < w1 / 2.5, "{w1} {w2}");
    }

    /// The count at which both sides are first bounded, as the bounds themselves say.
    #[test]
    fn flows_to_bound_is_where_both_sides_first_are() {
        for (p, level) in [(0.5, 0.95), (0.95, 0.99), (0.99, 0.995)] {
            let n = flows_to_bound(p, level);
            let both = |n: usize| {
                let (lo, hi) = bounds(&vec![1.0; n], p, (1.0 - level) / 2.0);
                lo.is_some() && hi.is_some()
            };
            assert!(both(n) && (n == MIN_CELL || !both(n - 1)), "p {p}: {n}");
        }
        assert!(flows_to_bound(0.99, 0.995) > flows_to_bound(0.95, 0.995));
    }

    /// Two arms alike (A/A), looks every 20 flows per arm over 1,500: the ratio's interval
    /// excludes 0 at some look in at most α of 300 runs; B's p95 30% lower is found (the
    /// interval wholly below 0) by 6,000 flows per arm in most runs, never the wrong way.
    #[test]
    fn the_ratio_holds_under_a_a_and_finds_a_lower_tail() {
        let (p, alpha) = (0.95, 0.1);
        let mut rng = Rng::new(17);
        let ever_excludes = |a: &[f64], b: &[f64], step: usize| {
            (1..=a.len() / step).any(|k| {
                let n = k * step;
                let sort = |s: &[f64]| {
                    let mut s = s[..n].to_vec();
                    s.sort_by(f64::total_cmp);
                    s
                };
                log_ratio(&sort(a), &sort(b), p, alpha).is_some_and(|[_, lo, hi]| lo > 0.0 || hi < 0.0)
            })
        };
        let runs = 300usize;
        let aa = (0..runs)
            .filter(|_| {
                let (a, b) = (lognormal(&mut rng, 1_500, 1.0), lognormal(&mut rng, 1_500, 1.0));
                ever_excludes(&a, &b, 20)
            })
            .count();
        crate::output::errln!("p95 ratio, A/A: excludes 0 at some look in {aa}/{runs} runs at α {alpha}");
        assert!(aa as f64 / runs as f64 <= alpha, "{aa}/{runs}");
        let (mut found, mut wrong) = (0, 0);
        for _ in 0..50 {
            let (mut a, mut b) = (lognormal(&mut rng, 6_000, 1.0), lognormal(&mut rng, 6_000, 0.7));
            a.sort_by(f64::total_cmp);
            b.sort_by(f64::total_cmp);
            let r = log_ratio(&a, &b, p, 0.05).unwrap();
            found += usize::from(r[2] < 0.0);
            wrong += usize::from(r[1] > 0.0);
            assert!(r[1] <= r[0] && r[0] <= r[2], "{r:?}");
        }
        crate::output::errln!("p95 30% lower on B, 6,000 flows per arm: found in {found}/50 runs");
        assert!(found >= 40 && wrong == 0, "{found} {wrong}");
    }
}
