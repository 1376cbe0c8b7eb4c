//! Congestion-control algorithms as the kernel lists them (not lsmod: built-in algorithms never
//! appear there).

use anyhow::{Context as _, Result};

/// The algorithms mainline Linux ships (net/ipv4/tcp_*.c), as shell completions offer them.
/// Which of them a host can use is the kernel's to say ([`available`], or a module to load).
pub(crate) const MAINLINE: &[&str] = &[
    "bbr",
    "bic",
    "cdg",
    "cubic",
    "dctcp",
    "highspeed",
    "htcp",
    "hybla",
    "illinois",
    "lp",
    "nv",
    "reno",
    "scalable",
    "vegas",
    "veno",
    "westwood",
    "yeah",
];

pub(crate) const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// Algorithms registered with the kernel right now (built in, or modules already loaded).
pub(crate) fn available() -> Result<Vec<String>> {
    let text = std::fs::read_to_string(AVAILABLE).with_context(|| format!("reading {AVAILABLE}"))?;
    Ok(text.split_whitespace().map(str::to_string).collect())
}
