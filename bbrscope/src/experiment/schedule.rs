//! The switchback's schedule: which arm every new connection of the experiment gets, block by
//! block (docs/experiment-method.md, "Switchback").
//!
//! Time is cut into blocks of `block_s` seconds counted from the Unix epoch, so that two hosts
//! given the same seed and block length run the same schedule at the same moments (a fleet's
//! hosts switch together, #40) and a recording names its blocks without a start time. Blocks come
//! in rounds of three: one where every connection runs A, one where every connection runs B, one
//! where each draws its arm as in a per-connection A/B (mixed). Each round's order is one of the
//! six permutations, drawn from the seed and the round's number alone. The A and B blocks answer
//! "what if everyone switched"; the mixed block, on the same traffic, what a per-connection A/B
//! would have said, and A's flows in it against the A block how much A's flows were slowed (or
//! helped) by B's beside them: the interference.
//!
//! A flow belongs to the block it started in (its connection got the block's arm then). Flows
//! that start within `burn_in_s` of a block's start are left out: the previous block's flows
//! still share the bottleneck with them.

use bbrscope_common::splitmix64;
use serde::{Deserialize, Serialize};

/// What a block's new connections get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Every connection arm A.
    A,
    /// Every connection arm B.
    B,
    /// Each connection its own draw, B with the experiment's split.
    Mixed,
}

/// The six orders of a round's three blocks.
const ORDERS: [[Kind; 3]; 6] = [
    [Kind::A, Kind::B, Kind::Mixed],
    [Kind::A, Kind::Mixed, Kind::B],
    [Kind::B, Kind::A, Kind::Mixed],
    [Kind::B, Kind::Mixed, Kind::A],
    [Kind::Mixed, Kind::A, Kind::B],
    [Kind::Mixed, Kind::B, Kind::A],
];

/// A switchback run's schedule: everything needed to say, for any moment, which block it is in
/// and what that block gives. Kept in the recording's header.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Length of a block, seconds.
    pub block_s: f64,
    /// The start of each block whose flows are left out, seconds.
    pub burn_in_s: f64,
    /// Draws every round's order.
    pub seed: u64,
}

impl Schedule {
    /// The block `ts` (Unix seconds) falls in.
    pub fn block_of(&self, ts: f64) -> i64 {
        (ts / self.block_s).floor() as i64
    }

    /// The round block `k` belongs to (three blocks each).
    pub(crate) fn round_of(k: i64) -> i64 {
        k.div_euclid(3)
    }

    /// When block `k` starts, Unix seconds.
    pub fn start_of(&self, k: i64) -> f64 {
        k as f64 * self.block_s
    }

    /// What block `k`'s new connections get.
    pub fn kind(&self, k: i64) -> Kind {
        // SplitMix64 of the seed and round: the same on every host and in every version.
        let order = splitmix64(self.seed ^ splitmix64(Self::round_of(k) as u64)) % ORDERS.len() as u64;
        ORDERS[order as usize][k.rem_euclid(3) as usize]
    }

    /// Whether a flow that started at `ts` is in its block's burn-in.
    pub(crate) fn in_burn_in(&self, ts: f64) -> bool {
        ts - self.start_of(self.block_of(ts)) < self.burn_in_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_has_one_block_of_each_kind_and_orders_vary() {
        let s = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 7 };
        let mut orders = std::collections::HashSet::new();
        for r in 0..200_i64 {
            let kinds: Vec<Kind> = (0..3).map(|i| s.kind(3 * r + i)).collect();
            for k in [Kind::A, Kind::B, Kind::Mixed] {
                assert_eq!(kinds.iter().filter(|&&x| x == k).count(), 1, "round {r}: {kinds:?}");
            }
            orders.insert(kinds);
        }
        assert_eq!(orders.len(), 6);
        // Negative blocks (before the epoch) are rounds too.
        let kinds: Vec<Kind> = (-3..0).map(|k| s.kind(k)).collect();
        assert!(kinds.contains(&Kind::A) && kinds.contains(&Kind::B) && kinds.contains(&Kind::Mixed));
    }

    #[test]
    fn blocks_are_aligned_to_the_epoch_and_burn_in_starts_each() {
        let s = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 1 };
        assert_eq!(s.block_of(1_800_000_000.0), 120_000_000);
        assert_eq!(s.start_of(120_000_000), 1_800_000_000.0);
        assert!(s.in_burn_in(1_800_000_002.9));
        assert!(!s.in_burn_in(1_800_000_003.0));
        assert!(!s.in_burn_in(1_800_000_014.9));
        // The same seed gives the same schedule; another seed another.
        let t = Schedule { seed: 2, ..s };
        let run = |s: &Schedule| (0..60).map(|k| s.kind(k)).collect::<Vec<_>>();
        assert_eq!(run(&s), run(&Schedule { block_s: 30.0, ..s }));
        assert_ne!(run(&s), run(&t));
    }
}
