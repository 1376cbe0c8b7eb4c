//! `bbrscope demo fairness`: one challenger flow (BBR) and 1..n incumbent flows (CUBIC) through
//! **one** emulated bottleneck, at a shallow and a deep drop-tail buffer — the caveat every BBR
//! article repeats, shown on this kernel, with [`model`]'s prediction of BBR's share beside it.
//! The other presets give each algorithm its own identical link; here they compete.

pub(crate) mod model;
pub(crate) mod summary;

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::{
    Conditions,
    run::{self, FlowRun, RoundSpec, Stop},
};

/// The buffers the preset compares, in BDPs: shallow (BBR is rate-limited and loss-blind, CUBIC
/// backs off) and deep (CUBIC fills the queue; BBR becomes window-limited).
pub(crate) const BUFFERS_BDP: [f64; 2] = [0.5, 8.0];
/// How many incumbent flows meet the one challenger.
pub(crate) const INCUMBENTS: [u32; 2] = [1, 3];

/// One configuration of the shared bottleneck.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct Scenario {
    pub(crate) buffer_bytes: u64,
    pub(crate) incumbents: u32,
}

/// What to run: `challenger` against `incumbent` flows in every scenario, `repeat` times.
pub(crate) struct Setup<'a> {
    /// The path; its buffer is replaced by each scenario's.
    pub(crate) cond: &'a Conditions,
    pub(crate) challenger: &'a str,
    pub(crate) incumbent: &'a str,
    pub(crate) scenarios: &'a [Scenario],
    pub(crate) repeat: u32,
    pub(crate) headless: bool,
    /// The path in words, for the display's title.
    pub(crate) title: &'a str,
}

/// One scenario's round: its flows, the challenger first.
pub(crate) struct Round {
    pub(crate) scenario: Scenario,
    pub(crate) repeat: u32,
    pub(crate) flows: Vec<FlowRun>,
}

pub(crate) struct Ran {
    pub(crate) rounds: Vec<Round>,
    /// Why the demo ended early, and how long its last round ran.
    pub(crate) stopped: Option<(Stop, Duration)>,
}

impl Setup<'_> {
    /// The flows of a scenario's round: the challenger, then the incumbents.
    fn algos(&self, s: &Scenario) -> Vec<String> {
        let mut algos = vec![self.challenger.to_string()];
        algos.extend((0..s.incumbents).map(|_| self.incumbent.to_string()));
        algos
    }
}

/// Every scenario, `repeat` times, under one observer and one display; `warn` gets a line for
/// each observer feature this kernel lacks.
pub(crate) async fn run(setup: &Setup<'_>, warn: &mut dyn FnMut(&str)) -> Result<Ran> {
    let mut session = run::Session::open(setup.headless, setup.cond.duration, warn)?;
    let mut rounds = Vec::new();
    let total = setup.scenarios.len() as u32 * setup.repeat;
    for repeat in 0..setup.repeat {
        for (i, scenario) in setup.scenarios.iter().enumerate() {
            let cond = Conditions { buffer_bytes: scenario.buffer_bytes, ..setup.cond.clone() };
            let algos = setup.algos(scenario);
            let label = format!(
                "1 {} vs {} {} — {}, buffer {:.1} BDP — round {}/{total}",
                setup.challenger,
                scenario.incumbents,
                setup.incumbent,
                setup.title,
                scenario.buffer_bytes as f64 / cond.bdp_bytes(),
                repeat * setup.scenarios.len() as u32 + i as u32 + 1,
            );
            let spec = RoundSpec { cond: &cond, algos: &algos, repeat, shared: true, label: &label };
            let (flows, stop) = session.round(&spec).await?;
            let elapsed = flows.iter().map(|f| f.elapsed).max().unwrap_or_default();
            rounds.push(Round { scenario: *scenario, repeat, flows });
            if let Some(stop) = stop {
                session.close();
                return Ok(Ran { rounds, stopped: Some((stop, elapsed)) });
            }
        }
    }
    session.close();
    Ok(Ran { rounds, stopped: None })
}
