//! `bbrscope status`: congestion control as it stands, per scope, and what bbrscope changed.

use anyhow::Result;

use crate::{
    cli::status::StatusArgs,
    output::{self, OutputError, outln},
    status::{self, Namespace, Status, advice::Shown},
};

pub fn run(args: StatusArgs) -> Result<()> {
    output::guard(|| {
        let status = status::gather(&args.root, args.netns.as_deref())?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&status)?)?;
        } else {
            print(&status)?;
        }
        Ok(())
    })
}

fn print_namespace(n: &Namespace) -> Result<(), OutputError> {
    let which = if n.initial { "initial network namespace" } else { "network namespace" };
    outln!("{} ({which})", n.namespace)?;
    outln!("  default          {}", n.default)?;
    outln!("  allowed          {}", n.allowed.join(" "))?;
    if let Some(q) = &n.default_qdisc {
        outln!("  default_qdisc    {q}")?;
    }
    for q in &n.qdiscs {
        let how = if q.is_kernel_default() { "kernel default" } else { "custom" };
        outln!("  qdisc            {} {} ({how})", q.ifname, q.kind)?;
    }
    for r in &n.routes_with_congctl {
        let by = if r.by_bbrscope { " (set by bbrscope)" } else { "" };
        outln!("  route            {} congctl {}{by}", r.route, r.congctl)?;
    }
    let t = &n.tuning;
    let triple = |v: Option<[u64; 3]>| v.map_or("unknown".into(), |[a, b, c]| format!("{a} {b} {c}"));
    outln!("  tcp_wmem         {}", triple(t.tcp_wmem))?;
    outln!("  tcp_rmem         {}", triple(t.tcp_rmem))?;
    if let Some(on) = t.tcp_slow_start_after_idle {
        let what = if on {
            "on (tcp_slow_start_after_idle 1: a keep-alive connection restarts from the initial window)"
        } else {
            "off (tcp_slow_start_after_idle 0)"
        };
        outln!("  idle restart     {what}")?;
    }
    if let Some(l) = t.tcp_notsent_lowat {
        let what = if l >= u64::from(u32::MAX) { format!("off ({l})") } else { l.to_string() };
        outln!("  notsent_lowat    {what}")?;
    }
    for r in &t.initcwnd_routes {
        outln!("  route            {} initcwnd {}", r.prefix, r.initcwnd)?;
    }
    if let Some(why) = &n.flows_unknown {
        return outln!("  live flows       unknown: {why}");
    }
    let flows: Vec<String> = n.flows.iter().map(|(k, v)| format!("{k} {v}")).collect();
    outln!("  live flows       {}", if flows.is_empty() { "none".into() } else { flows.join(", ") })
}

fn print(s: &Status) -> Result<(), OutputError> {
    outln!("available        {}", s.available.join(" "))?;
    outln!("bbr              {}", s.bbr.describe())?;
    let note = s.observer.note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
    outln!("observer         {}{note}", s.observer.path.unwrap_or("unknown"))?;
    print_namespace(&s.system)?;
    let boot = match (&s.boot.value, &s.boot.file) {
        (Some(v), Some(f)) => format!("{v} (from {f})"),
        (Some(v), None) => format!("{v}, the kernel's built-in default (no sysctl file sets it)"),
        _ => "the kernel's built-in default (no sysctl file sets it)".into(),
    };
    outln!("  next boot        {boot}")?;
    for n in &s.namespaces {
        print_namespace(n)?;
    }
    if s.bbrscope.is_empty() {
        outln!("changed by bbrscope: nothing")?;
    } else {
        outln!("changed by bbrscope:")?;
        for r in &s.bbrscope {
            match &r.algorithm {
                Some(a) => outln!("  {} -> {a}: {}", r.scope, r.now)?,
                None => outln!("  {}: {}", r.scope, r.now)?,
            }
        }
    }
    if s.experiments.is_empty() {
        outln!("experiment: none running")?;
    }
    for x in &s.experiments {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let age = now.saturating_sub(x.started_at);
        outln!(
            "experiment: running (pid {}{}): {} (A) vs {} (B), {}{}, {}% of {}; started {}m{:02}s ago, ends {}; \
             guardrail {}{}",
            x.pid,
            if x.id.is_empty() { String::new() } else { format!(", --id {}", x.id) },
            x.arms[0],
            x.arms[1],
            if x.design.is_empty() { String::new() } else { format!("{}, ", x.design) },
            x.split_words(),
            x.sample_pct,
            x.scope,
            age / 60,
            age % 60,
            x.ends,
            if x.guardrail { "on" } else { "off" },
            x.record.as_deref().map(|r| format!("; recording to {r}")).unwrap_or_default()
        )?;
    }
    print_advice(s.advice.as_ref())?;
    for w in &s.warnings {
        outln!("warning: {w}")?;
    }
    Ok(())
}

/// The last `bbrscope advise`: its findings (the checks that found nothing are counted), and
/// what changed since.
fn print_advice(a: Option<&Shown>) -> Result<(), OutputError> {
    let Some(a) = a else {
        return outln!("advice: none kept (`bbrscope advise` watches the flows and keeps its findings here)");
    };
    let k = &a.kept;
    let age = a.age_s;
    let when = if age < 3600 {
        format!("{}m{:02}s ago", age / 60, age % 60)
    } else {
        format!("{}h{:02}m ago", age / 3600, age % 3600 / 60)
    };
    let of = k.recording.as_deref().map(|r| format!(" of {r}")).unwrap_or_default();
    if k.flows == 0 {
        return outln!("advice: from `bbrscope advise` {when}: no flows were seen in its {:.0} s{of}", k.window_s);
    }
    let found: Vec<_> = k.findings.iter().filter(|f| f.status == "found").collect();
    outln!(
        "advice: from `bbrscope advise` {when} ({} flows over {:.0} s{of}): {} finding(s); {} other check(s) ok or with too few flows",
        k.flows,
        k.window_s,
        found.len(),
        k.findings.len() - found.len()
    )?;
    for f in found {
        let group = if f.group == "all flows" { String::new() } else { format!(" [{}]", f.group) };
        outln!("  {}{group} in {}: FINDING", f.check, f.netns)?;
        outln!("    {}", f.evidence)?;
        if let Some(why) = &f.withheld {
            outln!("    change: none shown: {why}")?;
        }
        if let Some(change) = &f.change {
            outln!("    change: {change}")?;
        }
    }
    if a.changed_since.is_empty() {
        outln!("  settings since: unchanged")
    } else {
        outln!("  settings changed since (the findings are of the settings before: run `bbrscope advise` again):")?;
        for c in &a.changed_since {
            outln!("    {c}")?;
        }
        Ok(())
    }
}
