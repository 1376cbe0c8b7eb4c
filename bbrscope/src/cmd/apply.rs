//! `bbrscope apply ALGO [scope]`: pre-checks shown as a plan, then the change, recorded so
//! `bbrscope revert` can undo it, then proof on a real socket.

use anyhow::Result;

use crate::{
    apply::{
        plan::Level,
        run::Outcome,
        scope::Scope,
        transaction::{self, Ending, ScopeReport},
    },
    cli::apply::ApplyArgs,
    error::UsageError,
    output::{self, OutputError, outln},
};

pub fn run(args: ApplyArgs) -> Result<()> {
    output::guard(|| apply(args))
}

fn apply(args: ApplyArgs) -> Result<()> {
    let request = args.request()?;
    let t = transaction::apply(&request, &mut |note| output::errln!("bbrscope: {note}"))?;
    let printed = print(&t.reports, args.json);
    match t.ending {
        Ending::Blocked => Err(UsageError::new("apply blocked by the checks above: nothing was changed").into()),
        // The report of what was planned is secondary to the error.
        Ending::Failed(msg) => anyhow::bail!(msg),
        // A failed verification outranks a lost report (its message says how to undo the change).
        Ending::Unverified(failed) => {
            anyhow::bail!("{} (the change stays in place; `bbrscope revert` undoes it)", failed.join("; "))
        }
        // The machine changed: a failed report must still say so, and how to undo it.
        Ending::Done => printed.map_err(|e| match &t.made {
            Some(m) if !e.is_closed_pipe() => anyhow::Error::from(e).context(format!("{m}, but the report was lost")),
            _ => e.into(),
        }),
    }
}

fn print(reports: &[ScopeReport], json: bool) -> Result<(), OutputError> {
    if json {
        let doc = serde_json::to_string_pretty(&serde_json::json!({ "scopes": reports }))
            .expect("the report serialises (plain data)");
        return outln!("{doc}");
    }
    for r in reports {
        let p = &r.plan;
        outln!("{} -> {}", p.scope, p.target())?;
        for c in &p.checks {
            let level = match c.level {
                Level::Ok => "ok",
                Level::Info => "info",
                Level::Warn => "WARN",
                Level::Block => "BLOCK",
            };
            outln!("  {level:<5} {:<11} {}", c.topic, c.text)?;
        }
        if !p.changes.is_empty() {
            outln!("  changes:")?;
            for (i, c) in p.changes.iter().enumerate() {
                outln!("    {}. {}", i + 1, c.describe())?;
            }
        }
        match &r.outcome {
            Some(Outcome::DryRun) => outln!("  dry run: nothing changed")?,
            Some(Outcome::AlreadyInPlace) => outln!("  already in place: nothing changed")?,
            Some(Outcome::Applied) => {
                outln!("  applied (recorded for `bbrscope revert{}`)", transaction::revert_hint(&p.scope))?;
            }
            None => {}
        }
        if let Some(v) = &r.verification {
            // The first probe is the proof; any other (a cgroup's accepting side, outside it)
            // only shows the contrast, and must not read as a second proof.
            for (i, probe) in v.probes.iter().enumerate() {
                let label = if i == 0 { "verified:" } else { "contrast:" };
                outln!("  {label} {} got {}", probe.how, probe.algorithm)?;
            }
            for s in &v.settings {
                outln!("  {} {}", if s.ok { "verified:" } else { "NOT SET: " }, s.reads)?;
            }
            if !v.probes.is_empty() && !matches!(p.scope, Scope::Route { .. }) {
                outln!("  existing connections keep the algorithm they started with")?;
            }
        }
    }
    Ok(())
}
