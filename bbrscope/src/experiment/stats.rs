//! Statistics primitives the analysis is built of, each a standard method a reader can check
//! (see [`super::analysis`]'s module comment): the percentile bootstrap of a quantile ratio drawn
//! through order statistics, the delta method for a ratio of sums, Pearson's chi-square for the
//! sample ratio, and the normal distribution's tail and quantile. Kept apart because they know
//! nothing of flows, arms or groups, and are tested against reference values on their own.

use serde::Serialize;

use crate::{quantile::type7, rng::Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DiffUnit {
    /// B relative to A, %: `(B/A − 1)·100`.
    RelativePct,
    /// B minus A in percentage points (rates).
    Points,
}

/// The difference between the arms in one metric.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Diff {
    pub(crate) unit: DiffUnit,
    pub(crate) estimate: f64,
    /// The `level` confidence interval.
    pub(crate) low: f64,
    pub(crate) high: f64,
    /// Two-sided p-value of "no difference" (from the bootstrap distribution, or the normal one).
    pub(crate) p_value: f64,
    /// The interval excludes zero.
    pub(crate) significant: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct SampleRatio {
    /// Flows per arm.
    pub(crate) flows: [usize; 2],
    pub(crate) expected_b: f64,
    pub(crate) observed_b: f64,
    pub(crate) chi2: f64,
    pub(crate) p_value: f64,
    /// The split is off: flows went missing or were added unevenly (an arm that makes clients
    /// retry, a summary lost, a bug in assignment); other results are suspect.
    pub(crate) mismatch: bool,
}

/// `sum x / sum y` over (x, y) pairs and its delta-method variance; `None` if `sum y` is 0.
pub(super) fn ratio_of_sums(pairs: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = pairs.len() as f64;
    let (sx, sy) = pairs.iter().fold((0.0, 0.0), |(a, b), &(x, y)| (a + x, b + y));
    if n < 2.0 || sy <= 0.0 {
        return None;
    }
    let (mx, my) = (sx / n, sy / n);
    let r = mx / my;
    let (mut vx, mut vy, mut cxy) = (0.0, 0.0, 0.0);
    for &(x, y) in pairs {
        vx += (x - mx) * (x - mx);
        vy += (y - my) * (y - my);
        cxy += (x - mx) * (y - my);
    }
    let (vx, vy, cxy) = (vx / (n - 1.0), vy / (n - 1.0), cxy / (n - 1.0));
    let var = (vx - 2.0 * r * cxy + r * r * vy) / (n * my * my);
    Some((r, var.max(0.0)))
}

/// The quantile q of one bootstrap resample of sorted data, drawn through the resample's order
/// statistics (see the module comment): k-th smallest index = ceil(n·U), U ~ Beta(k, n−k+1); the
/// next one is the smallest of the n−k draws above it.
fn resampled_quantile(sorted: &[f64], q: f64, rng: &mut Rng) -> f64 {
    let n = sorted.len();
    let h = (n - 1) as f64 * q;
    let lo = h.floor() as usize;
    let frac = h - lo as f64;
    let k = lo + 1;
    let index = |u: f64| ((u * n as f64).ceil() as usize).clamp(1, n) - 1;
    let u1 = rng.beta(k as f64, (n - k + 1) as f64);
    let x1 = sorted[index(u1)];
    if frac == 0.0 || k >= n {
        return x1;
    }
    let u2 = u1 + (1.0 - u1) * (1.0 - rng.uniform().powf(1.0 / (n - k) as f64));
    x1 + frac * (sorted[index(u2)] - x1)
}

/// Percentile-bootstrap interval of `quantile(b)/quantile(a) − 1` in %; `None` when A's quantile
/// is 0 (no relative change exists) in the data or in more than 1% of the resamples.
pub(super) fn bootstrap_rel(a: &[f64], b: &[f64], q: f64, resamples: usize, level: f64, seed: u64) -> Option<Diff> {
    let (pa, pb) = (type7(a, q), type7(b, q));
    if pa <= 0.0 {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut rel = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        let sa = resampled_quantile(a, q, &mut rng);
        let sb = resampled_quantile(b, q, &mut rng);
        if sa > 0.0 {
            rel.push((sb / sa - 1.0) * 100.0);
        }
    }
    if rel.is_empty() || rel.len() * 100 < resamples * 99 {
        return None;
    }
    Some(percentile_diff((pb / pa - 1.0) * 100.0, rel, level))
}

fn percentile_diff(estimate: f64, mut rel: Vec<f64>, level: f64) -> Diff {
    rel.sort_by(f64::total_cmp);
    let alpha = 1.0 - level;
    let (low, high) = (type7(&rel, alpha / 2.0), type7(&rel, 1.0 - alpha / 2.0));
    let r = rel.len() as f64;
    // Resamples at exactly 0 count on both sides: ties make the test conservative, not eager.
    let le = rel.iter().filter(|&&x| x <= 0.0).count() as f64 / r;
    let ge = rel.iter().filter(|&&x| x >= 0.0).count() as f64 / r;
    Diff {
        unit: DiffUnit::RelativePct,
        estimate,
        low,
        high,
        p_value: (2.0 * le.min(ge)).min(1.0),
        significant: low > 0.0 || high < 0.0,
    }
}

/// Pearson's chi-square test of the observed split against the requested one.
pub(crate) fn sample_ratio(flows: [usize; 2], expected_b: f64, alpha: f64) -> SampleRatio {
    let total = (flows[0] + flows[1]) as f64;
    let observed_b = if total > 0.0 { flows[1] as f64 / total } else { 0.0 };
    let (ea, eb) = (total * (1.0 - expected_b), total * expected_b);
    let chi2 = if total > 0.0 && ea > 0.0 && eb > 0.0 {
        (flows[0] as f64 - ea).powi(2) / ea + (flows[1] as f64 - eb).powi(2) / eb
    } else {
        0.0
    };
    // Chi-square with 1 d.f. is a squared standard normal: P(X > c) = erfc(sqrt(c/2)).
    let p_value = erfc((chi2 / 2.0).sqrt());
    SampleRatio { flows, expected_b, observed_b, chi2, p_value, mismatch: p_value < alpha }
}

/// Complementary error function (Numerical Recipes' `erfcc`, Chebyshev fit, relative error below
/// 1.2e-7 everywhere: plenty for p-values).
pub(crate) fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.26551223
        + t * (1.00002368
            + t * (0.37409196
                + t * (0.09678418
                    + t * (-0.18628806
                        + t * (0.27886807
                            + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// The standard normal quantile, by bisection on `erfc` (called once per metric: speed is moot).
pub(crate) fn normal_quantile(p: f64) -> f64 {
    let cdf = |x: f64| 0.5 * erfc(-x / std::f64::consts::SQRT_2);
    let (mut lo, mut hi) = (-40.0, 40.0);
    for _ in 0..200 {
        let mid = f64::midpoint(lo, hi);
        if cdf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    f64::midpoint(lo, hi)
}

/// `ln Γ(x)` for `x > 0` (Lanczos, Numerical Recipes' `gammln`: relative error below 2e-10).
fn ln_gamma(x: f64) -> f64 {
    const COF: [f64; 6] = [
        76.180_091_729_471_46,
        -86.505_320_329_416_77,
        24.014_098_240_830_91,
        -1.231_739_572_450_155,
        0.120_865_097_386_617_9e-2,
        -0.539_523_938_495_3e-5,
    ];
    let tmp = x + 5.5;
    let tmp = tmp - (x + 0.5) * tmp.ln();
    let mut y = x;
    let mut ser = 1.000_000_000_190_015;
    for c in COF {
        y += 1.0;
        ser += c / y;
    }
    -tmp + (2.506_628_274_631_000_5 * ser / x).ln()
}

/// The regularized incomplete beta function `I_x(a, b)` (Numerical Recipes' `betai`, its
/// continued fraction by the modified Lentz method).
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front = (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    let fraction = |a: f64, b: f64, x: f64| {
        let tiny = 1e-300;
        let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
        let mut c = 1.0;
        let mut d = 1.0 - qab * x / qap;
        d = if d.abs() < tiny { tiny } else { d };
        d = 1.0 / d;
        let mut h = d;
        for m in 1..300 {
            let m = f64::from(m);
            let m2 = 2.0 * m;
            for aa in [m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))] {
                d = 1.0 + aa * d;
                d = if d.abs() < tiny { tiny } else { d };
                c = 1.0 + aa / c;
                c = if c.abs() < tiny { tiny } else { c };
                d = 1.0 / d;
                h *= d * c;
            }
            if (d * c - 1.0).abs() < 1e-15 {
                break;
            }
        }
        h
    };
    if x < (a + 1.0) / (a + b + 2.0) {
        front * fraction(a, b, x) / a
    } else {
        1.0 - front * fraction(b, a, 1.0 - x) / b
    }
}

/// `P(|T| > t)` for Student's t with `df` degrees of freedom: `I_{df/(df+t²)}(df/2, 1/2)`.
pub(crate) fn t_two_sided_tail(t: f64, df: f64) -> f64 {
    incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
}

/// The `t > 0` with `P(|T| > t) = p` for Student's t with `df` degrees of freedom, by bisection.
/// Remembered per (p, df): an analysis asks for the same few (its α, clusters − 1) for every
/// group at every look, and one answer costs 200 evaluations of the incomplete beta function
/// (a sixth of a re-drawn recording's analysis time before it was remembered).
pub(crate) fn t_two_sided_quantile(p: f64, df: f64) -> f64 {
    use std::{cell::RefCell, collections::HashMap};
    thread_local! {
        static KNOWN: RefCell<HashMap<(u64, u64), f64>> = RefCell::new(HashMap::new());
    }
    let key = (p.to_bits(), df.to_bits());
    if let Some(t) = KNOWN.with_borrow(|known| known.get(&key).copied()) {
        return t;
    }
    let t = t_by_bisection(p, df);
    KNOWN.with_borrow_mut(|known| {
        // Bounded: a caller that varied df continuously would otherwise grow it for ever.
        if known.len() >= 4096 {
            known.clear();
        }
        known.insert(key, t);
    });
    t
}

fn t_by_bisection(p: f64, df: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1e6);
    for _ in 0..200 {
        let mid = f64::midpoint(lo, hi);
        if t_two_sided_tail(mid, df) > p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    f64::midpoint(lo, hi)
}

/// The smallest `n` in `from..=to` where `holds`, for a `holds` that once true stays true as `n`
/// grows (an interval that only narrows with more flows or clusters); `None` when it does not
/// hold at `to`. Bisection: about log2(to − from) evaluations.
pub(crate) fn first_where(from: u64, to: u64, holds: impl Fn(u64) -> bool) -> Option<u64> {
    if !holds(to) {
        return None;
    }
    if holds(from) {
        return Some(from);
    }
    let (mut below, mut at) = (from, to);
    while at - below > 1 {
        let mid = u64::midpoint(below, at);
        if holds(mid) {
            at = mid;
        } else {
            below = mid;
        }
    }
    Some(at)
}

/// The cluster-robust (sandwich) variance of a linear estimator from its clusters' scores: each
/// cluster's summed, centred influence on the estimate. `G/(G−1) Σ u_g²`, with the usual
/// small-sample factor for G clusters (Cameron & Miller, "A practitioner's guide to
/// cluster-robust inference", 2015: CR1). The switchback's rounds and the client design's
/// clients are its clusters.
pub(crate) fn cluster_variance(scores: &[f64]) -> f64 {
    let g = scores.len() as f64;
    g / (g - 1.0) * scores.iter().map(|u| u * u).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order-statistic shortcut must have the plain bootstrap's distribution: compare the
    /// mean and spread of a resampled p90 drawn both ways.
    #[test]
    fn resampled_quantile_matches_the_plain_bootstrap() {
        let mut rng = Rng::new(7);
        let mut data: Vec<f64> = (0..200).map(|_| (rng.normal()).exp()).collect();
        data.sort_by(f64::total_cmp);
        let q = 0.9;
        let r = 20_000;
        let fast: Vec<f64> = (0..r).map(|_| resampled_quantile(&data, q, &mut rng)).collect();
        let plain: Vec<f64> = (0..r)
            .map(|_| {
                let mut s: Vec<f64> = (0..data.len()).map(|_| data[(rng.next_u64() % 200) as usize]).collect();
                s.sort_by(f64::total_cmp);
                type7(&s, q)
            })
            .collect();
        let stats = |v: &[f64]| {
            let m = v.iter().sum::<f64>() / v.len() as f64;
            (m, (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt())
        };
        let ((mf, sf), (mp, sp)) = (stats(&fast), stats(&plain));
        assert!((mf - mp).abs() < 0.02 * mp, "means {mf} vs {mp}");
        assert!((sf - sp).abs() < 0.05 * sp, "spreads {sf} vs {sp}");
    }

    /// Reference values: scipy.stats.norm.ppf and scipy.special.erfc (scripts/reference).
    #[test]
    fn normal_quantile_and_erfc_have_their_values() {
        for (p, want) in [(0.975, 1.959963984540054), (0.995, 2.5758293035489004), (0.9, 1.2815515655446004)] {
            assert!((normal_quantile(p) - want).abs() < 1e-6, "{p}");
        }
        assert!((erfc(1.0) - 0.157_299_207_050_285_13).abs() < 2e-7);
    }

    /// Student's t quantiles from printed tables (e.g. scipy.stats.t.ppf): 0.975 with 1, 7 and
    /// 30 degrees of freedom, 0.995 with 10 and 29.
    #[test]
    fn student_t_quantiles_have_their_values() {
        for (p, df, want) in [
            (0.05, 1.0, 12.706_204_736),
            (0.05, 7.0, 2.364_624_252),
            (0.05, 30.0, 2.042_272_456),
            (0.01, 10.0, 3.169_272_673),
            (0.01, 29.0, 2.756_385_904),
        ] {
            let got = t_two_sided_quantile(p, df);
            assert!((got - want).abs() < 1e-6 * want, "df {df} p {p}: {got} vs {want}");
        }
        // Many degrees of freedom: the normal's.
        assert!((t_two_sided_quantile(0.05, 1e7) - 1.959_963_985).abs() < 1e-5);
    }
}
