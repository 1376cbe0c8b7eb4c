//! The kernel's tick rate (HZ): the sock_ops program paces its samples by the tick counter
//! (`jiffies`), so userspace turns the sample interval into ticks. From the kernel's
//! configuration where it is published, else measured against the kernel's own clock.

use std::{
    io::{BufRead as _, BufReader},
    time::Duration,
};

use super::kconfig;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hz {
    pub(crate) hz: u32,
    /// Where it came from: a configuration file's path, or `measured`.
    pub(crate) source: String,
}

/// [`discover`], once per process: the measurement takes 200 ms, and the sample clock and the
/// decoder both want the answer.
pub(crate) fn discover_once() -> Option<Hz> {
    static HZ: std::sync::OnceLock<Option<Hz>> = std::sync::OnceLock::new();
    HZ.get_or_init(discover).clone()
}

fn discover() -> Option<Hz> {
    let from_config = kconfig::read(&kconfig::release()).and_then(|(text, path)| {
        let hz = kconfig::value(&text, "CONFIG_HZ")?.parse().ok().filter(|&hz| hz > 0)?;
        Some(Hz { hz, source: path })
    });
    from_config.or_else(|| measure().map(|hz| Hz { hz, source: "measured".into() }))
}

/// The tick counter against CLOCK_MONOTONIC, so a record's timestamp converts to the `jiffies`
/// the kernel stamped its TCP chrono counters with: jiffies = `base` + ns × hz / 10⁹ (mod 2³²),
/// within a tick (the tick may run a little late on an idle CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JiffyClock {
    pub(crate) hz: u32,
    base: u64,
}

impl JiffyClock {
    /// The low 32 bits of jiffies (`tcp_jiffies32`) at CLOCK_MONOTONIC time `ns`.
    pub(crate) fn jiffies32_at(&self, ns: u64) -> u32 {
        (self.base.wrapping_add((u128::from(ns) * u128::from(self.hz) / 1_000_000_000) as u64)) as u32
    }
}

/// [`JiffyClock`] from one reading of /proc/timer_list (root only), once per process.
pub(crate) fn jiffy_clock() -> Option<JiffyClock> {
    static CLOCK: std::sync::OnceLock<Option<JiffyClock>> = std::sync::OnceLock::new();
    *CLOCK.get_or_init(|| {
        let hz = discover_once()?.hz;
        let (ns, jiffies) = timer_list()?;
        let elapsed = (u128::from(ns) * u128::from(hz) / 1_000_000_000) as u64;
        Some(JiffyClock { hz, base: jiffies.wrapping_sub(elapsed) })
    })
}

/// How long the measurement watches the tick counter: long enough that its error (a tick at
/// either end) is within `TOLERANCE_TICKS` of the nearest known rate.
const MEASURE_FOR: Duration = Duration::from_millis(200);
const TOLERANCE_TICKS: f64 = 1.5;
/// Rates kernels are built with (CONFIG_HZ choices across architectures).
const KNOWN: [u32; 11] = [24, 32, 48, 64, 100, 128, 200, 250, 300, 1000, 1024];

/// Two readings of /proc/timer_list, which prints the kernel's CLOCK_MONOTONIC time and the tick
/// counter together (readable by root only).
fn measure() -> Option<u32> {
    let (t0, j0) = timer_list()?;
    std::thread::sleep(MEASURE_FOR);
    let (t1, j1) = timer_list()?;
    let seconds = t1.checked_sub(t0)? as f64 / 1e9;
    (seconds > 0.0).then(|| snap(j1.checked_sub(j0)? as f64 / seconds, seconds)).flatten()
}

fn timer_list() -> Option<(u64, u64)> {
    let file = std::fs::File::open("/proc/timer_list").ok()?;
    let mut now = None;
    // The first CPU's section ends with the tick counter: stop reading there.
    for line in BufReader::new(file).lines() {
        let line = line.ok()?;
        if let Some(ns) = line.strip_prefix("now at ").and_then(|r| r.strip_suffix(" nsecs")) {
            now = ns.parse().ok();
        } else if let Some(j) = line.strip_prefix("jiffies: ") {
            return Some((now?, j.trim().parse().ok()?));
        }
    }
    None
}

/// The known rate nearest a measured one, if within the measurement's error.
fn snap(measured: f64, seconds: f64) -> Option<u32> {
    let tolerance = TOLERANCE_TICKS / seconds;
    KNOWN
        .iter()
        .copied()
        .min_by(|a, b| (f64::from(*a) - measured).abs().total_cmp(&(f64::from(*b) - measured).abs()))
        .filter(|&k| (f64::from(k) - measured).abs() <= tolerance)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock, read again later, agrees with the tick counter within two ticks.
    #[test]
    fn the_jiffy_clock_follows_the_tick_counter() {
        let Some(clock) = jiffy_clock() else {
            crate::output::errln!("skipped: no HZ or /proc/timer_list (root only)");
            return;
        };
        std::thread::sleep(Duration::from_millis(300));
        let (ns, jiffies) = timer_list().unwrap();
        let drift = clock.jiffies32_at(ns).wrapping_sub(jiffies as u32) as i32;
        assert!(drift.abs() <= 2, "{drift} ticks off");
    }

    #[test]
    fn measured_rates_snap_to_the_nearest_known_one_within_their_error() {
        assert_eq!(snap(251.0, 0.2), Some(250));
        assert_eq!(snap(295.0, 0.2), Some(300));
        assert_eq!(snap(95.0, 0.2), Some(100));
        assert_eq!(snap(1004.0, 0.2), Some(1000));
        // Between two known rates, further than a tick's error from either: unknown.
        assert_eq!(snap(275.0, 0.2), None);
    }

    /// Against the kernel's own configuration, where this machine publishes it (root only).
    #[test]
    fn the_measurement_finds_the_configured_rate() {
        let Some(configured) = kconfig::read(&kconfig::release())
            .and_then(|(text, _)| kconfig::value(&text, "CONFIG_HZ").and_then(|v| v.parse::<u32>().ok()))
        else {
            crate::output::errln!("skipped: this kernel publishes no configuration");
            return;
        };
        if std::fs::File::open("/proc/timer_list").is_err() {
            crate::output::errln!("skipped: /proc/timer_list is not readable (root only)");
            return;
        }
        assert_eq!(measure(), Some(configured));
    }
}
