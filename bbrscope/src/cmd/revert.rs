//! `bbrscope revert [scope]`: restores what `apply` recorded for the scope and removes only
//! what bbrscope added.

use anyhow::Result;

use crate::{
    apply::{
        change::Undone,
        revert::{self, Step, StepResult},
        scope::Scope,
    },
    cli::revert::RevertArgs,
    output::{self, OutputError, outln},
};

pub fn run(args: RevertArgs) -> Result<()> {
    output::guard(|| revert(&args))
}

fn revert(args: &RevertArgs) -> Result<()> {
    let request = args.request()?;
    let r = revert::revert(&request, &mut |note| output::errln!("bbrscope: {note}"))?;
    if r.scopes.is_empty() {
        if args.json {
            outln!("{}", serde_json::json!({ "scopes": [] }))?;
        } else {
            outln!("nothing recorded for that scope: bbrscope has not changed it (see `bbrscope status`)")?;
        }
        return Ok(());
    }
    print(&r.scopes, args.json).map_err(|e| {
        if e.is_closed_pipe() {
            return e.into();
        }
        anyhow::Error::from(e)
            .context(format!("reverted {}, but the report was lost (see `bbrscope status`)", r.named()))
    })?;
    if r.failures > 0 {
        anyhow::bail!("{} change(s) could not be undone; they stay recorded for another `bbrscope revert`", r.failures);
    }
    Ok(())
}

fn print(out: &[(Scope, Vec<Step>)], json: bool) -> Result<(), OutputError> {
    if json {
        let doc: Vec<_> = out.iter().map(|(s, steps)| serde_json::json!({ "scope": s, "steps": steps })).collect();
        let doc = serde_json::to_string_pretty(&serde_json::json!({ "scopes": doc }))
            .expect("the report serialises (plain data)");
        return outln!("{doc}");
    }
    for (s, steps) in out {
        outln!("{s}: reverted")?;
        for st in steps {
            let line = match &st.result {
                StepResult::Done(Undone::Restored(d)) => format!("restored  {d}"),
                StepResult::Done(Undone::Nothing(d)) => format!("unchanged {d}"),
                StepResult::Done(Undone::Kept(d)) => format!("KEPT      {d} (--force restores it)"),
                StepResult::Failed(e) => format!("FAILED    {}: {e}", st.change),
            };
            outln!("  {line}")?;
        }
    }
    Ok(())
}
