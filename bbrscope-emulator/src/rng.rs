//! One seeded random generator for everything that must reproduce from a seed: the demo
//! emulator's losses, the experiment analysis's bootstrap and simulations, the fuzz tests'
//! mutations. Written out here rather than taken from a crate so that a seed gives the same
//! numbers whatever crate versions a build resolves to. Not for anything secret. It lives in
//! the emulator's crate, whose losses draw from it, so that the emulator needs nothing of the
//! product; bbrscope re-exports it as `bbrscope::rng` for the rest.

/// SplitMix64 (Steele, Lea, Flood 2014; the seeder of Java's SplittableRandom and of xoshiro):
/// small, fast, passes BigCrush.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n) (n = 0 is taken as 1); the modulo bias is below 2^-40 for the sizes used.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in (0, 1), never exactly 0 or 1 (its log and powers are taken).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Gamma(shape, 1) for shape ≥ 1 (Marsaglia and Tsang 2000).
    pub fn gamma(&mut self, shape: f64) -> f64 {
        debug_assert!(shape >= 1.0);
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.uniform();
            if u < 1.0 - 0.0331 * x.powi(4) || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
                return d * v;
            }
        }
    }

    /// Beta(a, b) for a, b ≥ 1.
    pub fn beta(&mut self, a: f64, b: f64) -> f64 {
        let x = self.gamma(a);
        x / (x + self.gamma(b))
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn uniform_is_uniform_and_open() {
        let mut r = Rng::new(7);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| r.uniform()).collect();
        assert!(xs.iter().all(|&x| x > 0.0 && x < 1.0));
        let mean = xs.iter().sum::<f64>() / f64::from(n);
        assert!((mean - 0.5).abs() < 0.005, "{mean}");
    }

    #[test]
    fn gamma_and_normal_have_their_moments() {
        let mut rng = Rng::new(3);
        let n = 50_000;
        let g: Vec<f64> = (0..n).map(|_| rng.gamma(4.0)).collect();
        let mean = g.iter().sum::<f64>() / f64::from(n);
        let var = g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / f64::from(n);
        assert!((mean - 4.0).abs() < 0.05 && (var - 4.0).abs() < 0.15, "gamma(4): mean {mean} var {var}");
        let z: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        let zm = z.iter().sum::<f64>() / f64::from(n);
        let zv = z.iter().map(|x| (x - zm).powi(2)).sum::<f64>() / f64::from(n);
        assert!(zm.abs() < 0.02 && (zv - 1.0).abs() < 0.03, "normal: mean {zm} var {zv}");
    }
}
