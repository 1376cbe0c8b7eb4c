//! Converting the kernel's CLOCK_MONOTONIC timestamps to wall-clock time.

use rustix::time::{ClockId, clock_gettime};

fn now(clock: ClockId) -> i128 {
    let ts = clock_gettime(clock);
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// Unix time now, seconds (CLOCK_REALTIME, as `SystemTime`): what a switchback's blocks are
/// counted in.
pub(crate) fn unix_now() -> f64 {
    now(ClockId::Realtime) as f64 / 1e9
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    /// CLOCK_REALTIME - CLOCK_MONOTONIC, read once: later NTP steps do not reorder events.
    offset_ns: i128,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock { offset_ns: now(ClockId::Realtime) - now(ClockId::Monotonic) }
    }

    /// A fixed offset, for tests.
    #[cfg(test)]
    pub(crate) fn with_offset(offset_ns: i128) -> Self {
        Clock { offset_ns }
    }

    pub(crate) fn monotonic_ns() -> u64 {
        now(ClockId::Monotonic) as u64
    }

    /// Unix time in seconds.
    pub(crate) fn unix_secs(&self, mono_ns: u64) -> f64 {
        let ns = i128::from(mono_ns) + self.offset_ns;
        // i128 to f64 is a software routine, i64 to f64 one instruction; both round the same
        // integer to the same double (correctly rounded), and every date until 2262 fits.
        match i64::try_from(ns) {
            Ok(ns) => ns as f64 / 1e9,
            Err(_) => ns as f64 / 1e9,
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast conversion gives the same doubles as converting the exact 128-bit sum.
    #[test]
    fn unix_seconds_round_like_the_exact_sum() {
        let offsets = [0i128, 1_795_409_178_787_404_123 - 23_000_000_000_000, -5, i128::from(i64::MAX)];
        for off in offsets {
            let c = Clock::with_offset(off);
            for mono in [0u64, 1, 999, (1 << 53) + 1, 23_456_789_012_345, u64::MAX / 3, u64::MAX] {
                let exact = (i128::from(mono) + off) as f64 / 1e9;
                assert_eq!(c.unix_secs(mono).to_bits(), exact.to_bits(), "{mono} + {off}");
            }
        }
    }
}
