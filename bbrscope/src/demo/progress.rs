//! The live display until the dashboard exists: one line per algorithm on stderr, redrawn in
//! place twice a second on a terminal, or appended every few seconds when stderr is a file.

use std::{
    io::{IsTerminal as _, Write as _},
    time::Duration,
};

use crate::units::{fmt_rate, fmt_us};

/// How often the caller should call [`Progress::draw`].
pub(crate) const PERIOD: Duration = Duration::from_millis(500);
/// Draws between lines when stderr is not a terminal.
const PLAIN_EVERY: u32 = 10;

/// One flow's live state.
pub(crate) struct Row<'a> {
    pub(crate) cc: &'a str,
    /// Bytes the receiver has read since the start.
    pub(crate) received: u64,
    pub(crate) cwnd: Option<u32>,
    pub(crate) srtt_us: Option<u32>,
    pub(crate) retransmits: Option<u32>,
}

pub(crate) struct Progress {
    tty: bool,
    /// Lines drawn last time (to move back over them).
    drawn: usize,
    draws: u32,
    prev: Vec<(Duration, u64)>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress { tty: std::io::stderr().is_terminal(), drawn: 0, draws: 0, prev: Vec::new() }
    }
}

impl Progress {
    pub(crate) fn draw(&mut self, label: &str, elapsed: Duration, total: Duration, rows: &[Row]) {
        self.draws += 1;
        if self.prev.len() != rows.len() {
            self.prev = vec![(Duration::ZERO, 0); rows.len()];
        }
        let mut out = format!("{label}  {:.1} / {:.0} s\n", elapsed.as_secs_f64(), total.as_secs_f64());
        for (row, prev) in rows.iter().zip(self.prev.iter_mut()) {
            let avg = rate(row.received, elapsed);
            let now = rate(row.received.saturating_sub(prev.1), elapsed.saturating_sub(prev.0));
            *prev = (elapsed, row.received);
            let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
            out += &format!(
                "  {:<6} goodput {:>13} (now {:>13})  cwnd {:>5}  srtt {:>8}  retrans {:>6}\n",
                row.cc,
                fmt_rate(avg),
                fmt_rate(now),
                opt(row.cwnd),
                row.srtt_us.map_or("-".to_string(), |v| fmt_us(f64::from(v))),
                opt(row.retransmits),
            );
        }
        let mut err = std::io::stderr().lock();
        if self.tty {
            // Back to the first line drawn last time, clearing below.
            let _ = write!(err, "{}\x1b[J{out}", "\x1b[A".repeat(self.drawn));
            self.drawn = out.lines().count();
        } else if self.draws % PLAIN_EVERY == 1 {
            let _ = err.write_all(out.as_bytes());
        }
    }

    /// Removes the live lines (on a terminal) before the summary is printed.
    pub(crate) fn clear(&mut self) {
        if self.tty && self.drawn > 0 {
            let _ = write!(std::io::stderr(), "{}\x1b[J", "\x1b[A".repeat(self.drawn));
        }
        self.drawn = 0;
        self.prev.clear();
    }
}

fn rate(bytes: u64, over: Duration) -> f64 {
    if over.is_zero() { 0.0 } else { bytes as f64 * 8.0 / over.as_secs_f64() }
}
