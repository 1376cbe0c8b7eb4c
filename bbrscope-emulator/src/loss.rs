//! Random loss, seeded: Bernoulli, or bursty Gilbert–Elliott; the same seed gives the same losses
//! (see [`crate::rng`]).

use crate::rng::Rng;

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossSpec {
    /// Long-run fraction of packets dropped.
    pub rate: f64,
    /// Mean length of a run of consecutive losses, in packets (`None`: independent losses).
    pub burst: Option<f64>,
}

impl LossSpec {
    pub const NONE: LossSpec = LossSpec { rate: 0.0, burst: None };

    /// Why this combination cannot be emulated, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        match self.burst {
            Some(b) if !(b >= 1.0 && b.is_finite()) => Err(format!("--loss-burst {b}: a burst is at least 1 packet")),
            Some(_) if self.rate == 0.0 => Err("--loss-burst needs a --loss above 0".into()),
            Some(b) if gilbert_enter_bad(self.rate, b) > 1.0 => Err(format!(
                "--loss {}% with bursts of {b} packets is impossible: bursts must be at least {:.2} packets long",
                self.rate * 100.0,
                self.rate / (1.0 - self.rate)
            )),
            _ => Ok(()),
        }
    }
}

/// Good -> Bad transition probability that gives a stationary loss `rate` when bursts last
/// `burst` packets on average (Bad -> Good = 1/burst; P(Bad) = p / (p + r)).
fn gilbert_enter_bad(rate: f64, burst: f64) -> f64 {
    rate / (1.0 - rate) / burst
}

/// Decides, packet by packet, which are lost.
#[derive(Clone, Debug)]
pub(super) struct Loss {
    rng: Rng,
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    None,
    Bernoulli(f64),
    /// Simple Gilbert model: every packet in the Bad state is lost, none in Good.
    Gilbert {
        enter_bad: f64,
        leave_bad: f64,
        bad: bool,
    },
}

impl Loss {
    pub(super) fn new(spec: LossSpec, seed: u64) -> Self {
        let kind = match spec.burst {
            _ if spec.rate == 0.0 => Kind::None,
            None => Kind::Bernoulli(spec.rate),
            Some(burst) => {
                Kind::Gilbert { enter_bad: gilbert_enter_bad(spec.rate, burst), leave_bad: 1.0 / burst, bad: false }
            }
        };
        Loss { rng: Rng::new(seed), kind }
    }

    /// Whether the next packet is lost.
    pub(super) fn drop_next(&mut self) -> bool {
        match &mut self.kind {
            Kind::None => false,
            Kind::Bernoulli(p) => self.rng.uniform() < *p,
            Kind::Gilbert { enter_bad, leave_bad, bad } => {
                let u = self.rng.uniform();
                *bad = if *bad { u >= *leave_bad } else { u < *enter_bad };
                *bad
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: LossSpec, seed: u64, n: usize) -> Vec<bool> {
        let mut l = Loss::new(spec, seed);
        (0..n).map(|_| l.drop_next()).collect()
    }

    fn mean_burst(drops: &[bool]) -> f64 {
        let bursts = drops.windows(2).filter(|w| w[1] && !w[0]).count() + usize::from(drops[0]);
        drops.iter().filter(|&&d| d).count() as f64 / bursts as f64
    }

    #[test]
    fn bernoulli_rate_is_the_configured_one() {
        let n = 200_000;
        let p = 0.01;
        let lost = run(LossSpec { rate: p, burst: None }, 42, n).iter().filter(|&&d| d).count() as f64;
        let sigma = (n as f64 * p * (1.0 - p)).sqrt();
        assert!((lost - n as f64 * p).abs() < 4.0 * sigma, "{lost}");
    }

    #[test]
    fn same_seed_same_losses() {
        let spec = LossSpec { rate: 0.1, burst: Some(3.0) };
        assert_eq!(run(spec, 9, 10_000), run(spec, 9, 10_000));
        assert_ne!(run(spec, 9, 10_000), run(spec, 10, 10_000));
    }

    #[test]
    fn gilbert_keeps_the_rate_and_makes_bursts() {
        let drops = run(LossSpec { rate: 0.05, burst: Some(4.0) }, 3, 400_000);
        let rate = drops.iter().filter(|&&d| d).count() as f64 / drops.len() as f64;
        assert!((rate - 0.05).abs() < 0.004, "{rate}");
        let burst = mean_burst(&drops);
        assert!((burst - 4.0).abs() < 0.3, "{burst}");
        let independent = run(LossSpec { rate: 0.05, burst: None }, 3, 400_000);
        assert!(mean_burst(&independent) < 1.1);
    }

    #[test]
    fn zero_loss_never_drops() {
        assert!(!run(LossSpec::NONE, 1, 10_000).into_iter().any(|d| d));
    }

    #[test]
    fn impossible_bursts_are_refused() {
        assert!(LossSpec { rate: 0.01, burst: Some(3.0) }.check().is_ok());
        assert!(LossSpec { rate: 0.01, burst: Some(0.5) }.check().is_err());
        assert!(LossSpec { rate: 0.0, burst: Some(2.0) }.check().is_err());
        assert!(LossSpec { rate: 0.9, burst: Some(2.0) }.check().is_err());
    }
}
