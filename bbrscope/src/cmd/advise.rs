//! `bbrscope advise`: watch flows for a while, then say which settings beyond the algorithm hold
//! them back (docs/advise.md).

use std::io::BufReader;

use anyhow::Result;

use crate::{
    cli::advise::AdviseArgs,
    error::usage,
    observe::kernel::loader::{PathChoice, Receivers},
    output::{self, errln, outln},
};

pub async fn run(args: AdviseArgs) -> Result<()> {
    let advice = match &args.from {
        Some(file) => {
            let f = &args.observe.filter;
            let filtered = f.port.is_some()
                || f.addr.is_some()
                || f.cgroup.is_some()
                || f.cc.is_some()
                || f.comm.is_some()
                || f.pid.is_some()
                || f.netns.is_some();
            if filtered {
                usage!(
                    "--from weighs every flow of the recording: filter when recording instead \
                     (`bbrscope stream --port 443 > FILE`)"
                );
            }
            let name = file.display().to_string();
            let (advice, skipped) = if name == "-" {
                crate::advise::recorded(BufReader::new(std::io::stdin().lock()), "standard input")
            } else {
                match std::fs::File::open(file) {
                    Ok(f) => crate::advise::recorded(BufReader::new(f), &name),
                    Err(e) => usage!("cannot read {name}: {e} (give a file written by `bbrscope stream`)"),
                }
            }
            .map_err(|e| crate::error::UsageError::new(format!("{name} is not a bbrscope stream recording: {e:#}")))?;
            if let Some(s) = skipped.describe() {
                errln!("bbrscope: advise: {name}: {s}");
            }
            advice
        }
        None => {
            let mut opts = args.observe.options()?;
            // advise weighs a flow that only receives by its close: the sock_ops path gives that
            // with the flow's namespace, which the tracepoint path `--receivers` picks for
            // stream and top cannot tell.
            if opts.receivers == Receivers::Sampled && opts.path == PathChoice::Auto {
                opts.receivers = Receivers::AtClose;
            }
            crate::advise::live(&opts, args.duration).await?
        }
    };
    output::guard(|| {
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&advice)?)?;
        } else {
            output::out!("{}", crate::advise::render(&advice))?;
        }
        Ok(())
    })?;
    // Once given, kept for `bbrscope status` where bbrscope keeps its records (root's); a user
    // weighing a recording without root just reads it.
    if rustix::process::geteuid().is_root()
        && let Err(e) = crate::status::advice::keep(&args.root, &advice)
    {
        errln!("bbrscope: advise: not kept for `bbrscope status`: {e:#}");
    }
    Ok(())
}
