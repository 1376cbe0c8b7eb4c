//! The emulated path as pure arithmetic on virtual time, so it can be tested without packets:
//! data direction = random loss -> bottleneck (serialisation at rate C behind a drop-tail queue
//! of B bytes) -> propagation delay; return direction = delay only.

use std::time::Duration;

use crate::loss::{Loss, LossSpec};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    pub rate_bps: u64,
    pub rtt: Duration,
    /// Drop-tail queue in front of the bottleneck, bytes.
    pub buffer_bytes: u64,
    pub loss: LossSpec,
    pub seed: u64,
}

impl LinkConfig {
    pub fn one_way_ns(&self) -> u64 {
        self.rtt.as_nanos() as u64 / 2
    }
}

/// What happens to a packet entering the data direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Lost,
    QueueFull,
    /// Leaves the emulator at `release_ns` after waiting `queue_ns` behind earlier packets.
    Deliver {
        release_ns: u64,
        queue_ns: u64,
    },
}

/// Loss, then the bottleneck, then the delay line.
pub(super) struct DataPath {
    loss: Loss,
    rate_bps: u64,
    buffer_bytes: u64,
    delay_ns: u64,
    /// When the bottleneck finishes sending everything admitted so far.
    busy_until_ns: u64,
    /// Sub-nanosecond remainder of serialisation times (in units of 1/rate ns), so rounding
    /// never accumulates into a rate error.
    remainder: u128,
}

impl DataPath {
    pub(super) fn new(cfg: &LinkConfig) -> Self {
        DataPath {
            loss: Loss::new(cfg.loss, cfg.seed),
            rate_bps: cfg.rate_bps,
            buffer_bytes: cfg.buffer_bytes,
            delay_ns: cfg.one_way_ns(),
            busy_until_ns: 0,
            remainder: 0,
        }
    }

    /// Bytes waiting for (or in) the bottleneck at `now_ns`, as a fluid: the part of a packet
    /// already serialised no longer occupies the queue.
    pub(super) fn backlog_bytes(&self, now_ns: u64) -> u64 {
        let ahead_ns = u128::from(self.busy_until_ns.saturating_sub(now_ns));
        (ahead_ns * u128::from(self.rate_bps) / 8_000_000_000) as u64
    }

    pub(super) fn arrive(&mut self, now_ns: u64, bytes: usize) -> Verdict {
        if self.loss.drop_next() {
            return Verdict::Lost;
        }
        if self.backlog_bytes(now_ns) + bytes as u64 > self.buffer_bytes {
            return Verdict::QueueFull;
        }
        let start = self.busy_until_ns.max(now_ns);
        let bit_ns = bytes as u128 * 8 * 1_000_000_000 + self.remainder;
        let rate = u128::from(self.rate_bps);
        self.remainder = bit_ns % rate;
        self.busy_until_ns = start + (bit_ns / rate) as u64;
        Verdict::Deliver { release_ns: self.busy_until_ns + self.delay_ns, queue_ns: start - now_ns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn link(rate_bps: u64, buffer_bytes: u64, loss: f64) -> DataPath {
        DataPath::new(&LinkConfig {
            rate_bps,
            rtt: Duration::from_millis(100),
            buffer_bytes,
            loss: LossSpec { rate: loss, burst: None },
            seed: 1,
        })
    }

    #[test]
    fn idle_packet_pays_serialisation_and_delay_only() {
        let mut l = link(50_000_000, 100_000, 0.0);
        // 1500 B at 50 Mbit/s = 240 us, plus 50 ms one way.
        assert_eq!(
            l.arrive(1_000 * MS, 1500),
            Verdict::Deliver { release_ns: 1_000 * MS + 240_000 + 50 * MS, queue_ns: 0 }
        );
    }

    #[test]
    fn back_to_back_packets_leave_at_the_link_rate() {
        let mut l = link(50_000_000, 10_000_000, 0.0);
        let releases: Vec<u64> = (0..1000)
            .map(|_| match l.arrive(0, 1500) {
                Verdict::Deliver { release_ns, .. } => release_ns,
                v => panic!("{v:?}"),
            })
            .collect();
        assert!(releases.windows(2).all(|w| w[1] - w[0] == 240_000));
    }

    #[test]
    fn odd_rates_do_not_drift() {
        // 1500 B at 7 Mbit/s = 1714285.71 ns: rounding per packet would drift by 0.7 ms per 1000.
        let mut l = link(7_000_000, u64::MAX / 2, 0.0);
        let mut last = 0;
        for _ in 0..7000 {
            if let Verdict::Deliver { release_ns, .. } = l.arrive(0, 1500) {
                last = release_ns;
            }
        }
        assert_eq!(last - 50 * MS, 12_000_000_000);
    }

    #[test]
    fn drop_tail_queue_holds_the_buffer_and_no_more() {
        let mut l = link(10_000_000, 15_000, 0.0);
        let verdicts: Vec<Verdict> = (0..20).map(|_| l.arrive(0, 1500)).collect();
        let delivered = verdicts.iter().filter(|v| matches!(v, Verdict::Deliver { .. })).count();
        assert_eq!(delivered, 10);
        assert!(verdicts[10..].iter().all(|v| *v == Verdict::QueueFull));
        // The 10th packet waited for 9 ahead of it: 9 x 1.2 ms.
        assert!(matches!(verdicts[9], Verdict::Deliver { queue_ns: 10_800_000, .. }));
        // Once one packet has drained, one more fits.
        assert!(matches!(l.arrive(1_200_000, 1500), Verdict::Deliver { .. }));
        assert_eq!(l.arrive(1_200_000, 1500), Verdict::QueueFull);
    }

    #[test]
    fn random_loss_comes_before_the_queue() {
        let mut l = link(10_000_000, 1_000_000_000, 0.5);
        let lost = (0..10_000).filter(|_| l.arrive(0, 100) == Verdict::Lost).count();
        assert!((4_800..5_200).contains(&lost), "{lost}");
    }
}
