//! `bbrscope demo`: CUBIC vs BBR on an emulated long, lossy path (see `crate::demo`).

use std::time::Duration;

use anyhow::{Result, bail};

use crate::{
    cli::demo::DemoArgs,
    demo::{
        Conditions, fairness, plot,
        presets::PresetName,
        run::{self, FlowRun, Stop},
        summary::{RunConditions, StoppedEarly, Summary},
    },
    error::usage,
    observe::kernel::bbr_version,
    output::{self, outln},
    sys::privileges,
    units::{fmt_rate, fmt_us},
};

/// Above this, release timing degraded on a 2-core VM (measured: mean lateness 20 us at
/// 200 Mbit/s, 500-700 us with 3-4% of packets over 1 ms late at 500 Mbit/s and 1 Gbit/s).
const ACCURATE_RATE_BPS: u64 = 200_000_000;
/// Runs longer than this in total need `--yes`.
const LONG_RUN: Duration = Duration::from_secs(3600);

pub async fn run(args: DemoArgs) -> Result<()> {
    let name = args.preset.unwrap_or(PresetName::GoogleLossy);
    let preset = name.preset();
    let (cond, loss) = args.conditions(&preset)?;
    if name == PresetName::Fairness {
        return fairness(&args, cond).await;
    }
    let algos = args.algorithms()?;
    preflight(&args, &cond, if args.sequential { algos.len() as u32 } else { 1 })?;
    let title = path_title(&cond, true);
    let rounds = run::Rounds {
        cond: &cond,
        algos: &algos,
        repeat: args.repeat,
        sequential: args.sequential,
        headless: args.headless,
        title: &title,
    };
    let ran = run::all(&rounds, &mut |note| output::errln!("bbrscope: warning: {note}")).await?;
    let modified = (cond.rate_bps, cond.rtt, cond.loss, cond.buffer_bytes)
        != (preset.rate_bps, preset.rtt, preset.loss, preset.buffer.bytes(cond.bdp_bytes()))
        || loss.burst.is_some();
    let duration = cond.duration;
    let conditions = RunConditions {
        buffer_bdp: cond.buffer_bytes as f64 / cond.bdp_bytes(),
        path: cond,
        repeat: args.repeat,
        sequential: args.sequential,
    };
    let bbr = algos.iter().any(|a| a == "bbr").then(bbr_version::running);
    let summary = Summary::new(&preset, modified, conditions, &algos, &ran.runs).stopped(early(ran.stopped)).bbr(bbr);
    report(&args, &summary, &algos, &ran.runs, &title, duration)?;
    ended(ran.stopped, duration)
}

/// `demo fairness`: the challenger against one and several incumbents through one link, at
/// each buffer (the preset's two, or `--buffer`'s one).
async fn fairness(args: &DemoArgs, cond: Conditions) -> Result<()> {
    let [incumbent, challenger] = &args.fairness_pair()?;
    let buffers = args.fairness_buffers(&cond)?;
    let scenarios: Vec<fairness::Scenario> = buffers
        .iter()
        .flat_map(|&buffer_bytes| {
            fairness::INCUMBENTS.map(|incumbents| fairness::Scenario { buffer_bytes, incumbents })
        })
        .collect();
    preflight(args, &cond, scenarios.len() as u32)?;
    let title = path_title(&cond, false);
    let setup = fairness::Setup {
        cond: &cond,
        challenger,
        incumbent,
        scenarios: &scenarios,
        repeat: args.repeat,
        headless: args.headless,
        title: &title,
    };
    let ran = fairness::run(&setup, &mut |note| output::errln!("bbrscope: warning: {note}")).await?;
    let summary = fairness::summary::Summary::new(&cond, challenger, incumbent, bbr_version::running(), &ran)
        .stopped(early(ran.stopped));
    output::guard(|| {
        summary_out(args.json, || summary.to_json(), || summary.to_table())?;
        if let Some(path) = &args.plot {
            for (k, round) in ran.rounds.iter().enumerate() {
                let file = plot::numbered(path, k + 1);
                let runs: Vec<&FlowRun> = round.flows.iter().collect();
                let secs = runs.iter().map(|r| r.elapsed).max().unwrap_or(cond.duration).as_secs_f64();
                let what = format!(
                    "1 {challenger} vs {} {incumbent}, one link — {title}, buffer {:.1} BDP",
                    round.scenario.incumbents,
                    round.scenario.buffer_bytes as f64 / cond.bdp_bytes()
                );
                plot::write(&file, &what, secs, &runs)?;
                if !args.json {
                    outln!("plot: {}", file.display())?;
                }
            }
        }
        Ok(())
    })?;
    ended(ran.stopped, cond.duration)
}

/// The path in words, for titles; with or without its buffer.
fn path_title(cond: &Conditions, with_buffer: bool) -> String {
    let mut t = format!(
        "{} bottleneck, {} RTT, {}% loss",
        fmt_rate(cond.rate_bps as f64),
        fmt_us(cond.rtt.as_micros() as f64),
        (cond.loss * 1e4).round() / 1e2,
    );
    if with_buffer {
        t += &format!(", buffer {:.2} BDP", cond.buffer_bytes as f64 / cond.bdp_bytes());
    }
    t
}

fn early(stopped: Option<(Stop, Duration)>) -> Option<StoppedEarly> {
    stopped.map(|(stop, t)| StoppedEarly { by: stop.by().to_string(), after_s: t.as_secs_f64() })
}

/// The exit after the report: 0 when the demo ran its course or was quit with q, an error
/// (exit 1) when a signal stopped it.
fn ended(stopped: Option<(Stop, Duration)>, duration: Duration) -> Result<()> {
    match stopped {
        None => Ok(()),
        Some((Stop::Quit, t)) => {
            output::errln!(
                "bbrscope: stopped with q after {:.1} of {:.0} s: the summary covers the part that ran",
                t.as_secs_f64(),
                duration.as_secs_f64()
            );
            Ok(())
        }
        Some((Stop::Interrupted(by), t)) => bail!(
            "interrupted by {by} after {:.1} of {:.0} s: stopped the flows and removed the emulated links; the \
             summary covers the part that ran",
            t.as_secs_f64(),
            duration.as_secs_f64()
        ),
    }
}

/// Everything else checked before anything is built (run length, plot path, root, tracing
/// privileges), with the notes the options deserve; `rounds` per repetition.
fn preflight(args: &DemoArgs, cond: &Conditions, rounds: u32) -> Result<()> {
    let rounds = rounds * args.repeat;
    let total = cond.duration.saturating_mul(rounds);
    if total > LONG_RUN && !args.yes {
        usage!(
            "this demo would run for {:.1} hours ({} round(s) of {} s); add --yes if you mean it",
            total.as_secs_f64() / 3600.0,
            rounds,
            cond.duration.as_secs_f64()
        );
    }
    if let Some(p) = &args.plot
        && let Err(e) = crate::figure::check_path(p)
    {
        usage!("{e}");
    }
    if !rustix::process::geteuid().is_root() {
        usage!("bbrscope demo needs root: it creates network namespaces and TUN devices and loads eBPF programs");
    }
    privileges::require_tracing("bbrscope demo")?;
    if let Some(r) = args.rate.filter(|r| r.in_bytes) {
        output::errln!(
            "bbrscope: note: --rate is in bytes per second, as tc(8) reads 'bps' and 'B/s': {} (write 'mbit' for \
             megabits)",
            fmt_rate(r.bps as f64)
        );
    }
    if cond.rate_bps > ACCURATE_RATE_BPS {
        output::errln!(
            "bbrscope: warning: above {} the emulator's timing may slip on small machines; see 'released late' in \
             the emulator counters",
            fmt_rate(ACCURATE_RATE_BPS as f64)
        );
    }
    Ok(())
}

/// The summary (table or JSON) and the plot, through the one output path.
fn report(
    args: &DemoArgs,
    summary: &Summary,
    algos: &[String],
    runs: &[FlowRun],
    title: &str,
    duration: Duration,
) -> Result<()> {
    let plot_runs: Vec<&FlowRun> = algos.iter().filter_map(|cc| runs.iter().find(|r| &r.cc == cc)).collect();
    let plot_s = plot_runs.iter().map(|r| r.elapsed).max().unwrap_or(duration).as_secs_f64();
    output::guard(|| {
        summary_out(args.json, || summary.to_json(), || summary.to_table())?;
        if let Some(path) = &args.plot {
            plot::write(path, &format!("{} — {title}", algos.join(" vs ")), plot_s, &plot_runs)?;
            if !args.json {
                outln!("\nplot: {}", path.display())?;
            }
        }
        Ok(())
    })
}

/// A summary on stdout: one JSON line, or the table.
fn summary_out(json: bool, as_json: impl FnOnce() -> String, as_table: impl FnOnce() -> String) -> Result<()> {
    if json {
        outln!("{}", as_json())?;
    } else {
        output::out!("{}", as_table())?;
    }
    Ok(())
}
