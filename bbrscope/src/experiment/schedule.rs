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
//! A host-level switchback (#40, `--design host-switchback`) folds a salt of the host's name into
//! every round's draw: each host of a fleet runs its own randomized order of the same rounds, so at
//! any moment about a third of the hosts are in each kind of block. A host's A and B blocks then
//! answer "what does this host's uplink do if all of it switches" while the rest of the fleet is
//! on a mix, not "what if the whole fleet switches at once" (the synchronized schedule's question,
//! which shared upstream bottlenecks answer differently); and a shock that hits every host at once
//! (a traffic peak, an upstream fault) falls on every kind of block alike. Rounds stay aligned to
//! the epoch, so a fleet still adds its hosts' rounds as they are.
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
    /// A host-level switchback's salt of this host's name ([`Schedule::host_salt`]): the host's
    /// rounds are drawn from the seed and it. `None`: every host given the seed runs its blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<u64>,
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
        // SplitMix64 of the seed (and the host's salt) and round: the same on every host given
        // them, and in every version.
        let seed = self.host.map_or(self.seed, |h| splitmix64(self.seed ^ h));
        let order = splitmix64(seed ^ splitmix64(Self::round_of(k) as u64)) % ORDERS.len() as u64;
        ORDERS[order as usize][k.rem_euclid(3) as usize]
    }

    /// The salt a host-level switchback draws a host's rounds with, from the host's name
    /// (`--host-id`, default its hostname): FNV-1a of the name's bytes through SplitMix64, so that
    /// a name gives the same salt on every machine and in every version, and an analysis of the
    /// host's recording needs nothing but its header.
    pub fn host_salt(id: &str) -> u64 {
        splitmix64(bbrscope_common::fnv1a64(id.as_bytes()))
    }

    /// The schedule that placed `o`: its own host's when it came from a pooled recording of a
    /// host-level switchback, else this one.
    pub(crate) fn of(&self, o: &crate::experiment::Observation) -> Schedule {
        Schedule { host: o.host.or(self.host), ..*self }
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
        let s = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 7, host: None };
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
        let s = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 1, host: None };
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

    /// A host-level schedule: every host's rounds are still one block of each kind, each host's
    /// order its own (the same for the same name and seed), so that at a moment a fleet's hosts
    /// are spread over the kinds; without a salt, the seed's schedule exactly as before hosts had one.
    #[test]
    fn hosts_draw_their_own_orders_of_the_same_rounds() {
        let fleet = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 11, host: None };
        // The synchronized schedule is the one every recording made before host salts has.
        let before: Vec<Kind> = (0..12).map(|k| fleet.kind(k)).collect();
        assert_eq!(before, (0..12).map(|k| Schedule { seed: 11, ..fleet }.kind(k)).collect::<Vec<_>>());
        assert_eq!(Schedule::host_salt("web-1"), Schedule::host_salt("web-1"));
        let hosts: Vec<Schedule> =
            (0..60).map(|i| Schedule { host: Some(Schedule::host_salt(&format!("web-{i}"))), ..fleet }).collect();
        for h in &hosts {
            for r in 0..50_i64 {
                let kinds: Vec<Kind> = (0..3).map(|i| h.kind(3 * r + i)).collect();
                for k in [Kind::A, Kind::B, Kind::Mixed] {
                    assert_eq!(kinds.iter().filter(|&&x| x == k).count(), 1, "round {r}: {kinds:?}");
                }
            }
        }
        // Block by block, each kind holds between a sixth and a half of the 60 hosts (a third
        // expected: 20 ± 3.7), and the hosts' orders are not the synchronized one.
        for k in 0..150 {
            let a = hosts.iter().filter(|h| h.kind(k) == Kind::A).count();
            let b = hosts.iter().filter(|h| h.kind(k) == Kind::B).count();
            assert!((10..=30).contains(&a) && (10..=30).contains(&b), "block {k}: {a} hosts on A, {b} on B");
        }
        let apart = |x: &Schedule, y: &Schedule| (0..150).filter(|&k| x.kind(k) != y.kind(k)).count();
        assert!(apart(&hosts[0], &hosts[1]) > 50 && apart(&hosts[0], &fleet) > 50);
        // A header without a host salt reads as before, and one with it keeps it.
        let json = serde_json::to_string(&fleet).unwrap();
        assert!(!json.contains("host"), "{json}");
        let back: Schedule = serde_json::from_str(&serde_json::to_string(&hosts[3]).unwrap()).unwrap();
        assert_eq!(back, hosts[3]);
    }
}
