//! The source tree's shape, checked like behaviour (README, "Layout"): which top-level folder of
//! bbrscope/src may use which — the OS door (`sys`) uses no feature, the observer pipeline
//! (`observe`) uses only `sys` and the leaves, features use the pipeline side by side, `status`
//! alone composes them, commands use features — and commands stay thin. Read from the sources as
//! text; no root needed.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`observe` for src/observe/kernel/btf.rs).
fn top(path: &Path) -> String {
    let rel = path.strip_prefix(src()).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// Code without its unit tests and comments: what the module itself uses.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap();
    text.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n")
}

/// Top-level module → the top-level modules it names (`crate::x`, or `x::` first in a `use
/// crate::{...}` group).
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| top(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = top(f);
        if from == "main" || from == "lib" {
            continue;
        }
        let text = code(f);
        let mut named = Vec::new();
        for part in text.split("crate::").skip(1) {
            named.push(part.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap().to_string());
        }
        // `use crate::{\n    apply::{...},\n    sys::netns,\n};`: each group line's first name.
        for group in text.split("use crate::{").skip(1) {
            for line in group.split("};").next().unwrap().lines() {
                let word = line.trim().split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap();
                named.push(word.to_string());
            }
        }
        let to = graph.entry(from.clone()).or_default();
        to.extend(named.into_iter().filter(|m| modules.contains(m) && *m != from));
    }
    graph
}

/// What each top-level module may use: layers downwards, never up. A module not listed is a leaf
/// (units, quantile, error, output, figure, newfile, prose, scrape) and may use only other leaves. (`rng` is
/// the emulator crate's, re-exported: outside this tree, like every other crate.)
///
/// The features (export, advise, experiment, demo, apply) sit side by side on the pipeline, none
/// using another; `status` is the one that looks across them (and the dashboard, as a sink, knows
/// an experiment only as its `tui::Panel`).
const LAYERS: &[(&str, &[&str])] = &[
    ("sys", &[]),
    ("observe", &["sys"]),
    ("tui", &["observe"]),
    ("export", &["observe", "sys"]),
    ("advise", &["observe", "sys"]),
    ("experiment", &["observe", "sys", "tui"]),
    ("demo", &["observe", "sys", "tui"]),
    ("apply", &["observe", "sys"]),
    ("status", &["observe", "sys", "advise", "apply", "experiment"]),
    ("cli", &["observe", "sys", "apply", "demo", "experiment", "status", "tui"]),
    ("cmd", &["cli", "observe", "sys", "advise", "apply", "demo", "experiment", "export", "status", "tui"]),
];

/// Pairs of modules allowed to use each other: none. (The last, experiment ↔ tui, went when the
/// dashboard came to know a running experiment only as a `tui::Panel`.)
const KNOWN_CIRCLES: &[(&str, &str)] = &[];

const LEAVES: &[&str] = &["units", "quantile", "error", "output", "figure", "newfile", "prose", "scrape"];

#[test]
fn modules_use_only_the_layers_below_them() {
    let graph = uses();
    let mut wrong = Vec::new();
    for (from, to) in &graph {
        let allowed: &[&str] = match LAYERS.iter().find(|(m, _)| m == from) {
            Some((_, allowed)) => allowed,
            None if LEAVES.contains(&from.as_str()) => &[],
            None => {
                wrong.push(format!("{from}: a top-level module the layout does not place"));
                continue;
            }
        };
        for t in to {
            if !allowed.contains(&t.as_str()) && !LEAVES.contains(&t.as_str()) {
                wrong.push(format!("{from} uses {t}"));
            }
        }
    }
    assert!(wrong.is_empty(), "uses against the layout (README, Layout):\n{}", wrong.join("\n"));
}

#[test]
fn no_two_modules_use_each_other() {
    let graph = uses();
    let mut circles = BTreeSet::new();
    for (a, to) in &graph {
        for b in to {
            if graph.get(b).is_some_and(|back| back.contains(a)) {
                circles.insert(if a < b { (a.clone(), b.clone()) } else { (b.clone(), a.clone()) });
            }
        }
    }
    let known: BTreeSet<(String, String)> = KNOWN_CIRCLES.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(circles, known, "two modules that use each other");
}

/// The functions of `dir`'s code (its unit tests left out) longer than `max` lines, as
/// "path: fn name (n lines)". A function ends at the first `}` at its own indentation; one on a
/// single line, or a declaration without a body, is short.
fn long_functions(dir: &str, max: usize) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&src().join(dir), &mut files);
    let mut long = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.split("#[cfg(test)]").next().unwrap().lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let body = line.trim_start();
            let indent = &line[..line.len() - body.len()];
            let mut head = body;
            if let Some(rest) = head.strip_prefix("pub") {
                head = rest.strip_prefix(' ').or_else(|| rest.split_once(") ").map(|(_, r)| r)).unwrap_or(rest);
            }
            let head = head.trim_start_matches("async ").trim_start_matches("const ");
            let end = line.trim_end();
            if !head.starts_with("fn ") || end.ends_with('}') || end.ends_with(';') {
                continue;
            }
            let close = format!("{indent}}}");
            let len = lines[i..].iter().position(|l| *l == close).map_or(lines.len() - i, |p| p + 1);
            if len > max {
                let name = head.split(['(', '<']).next().unwrap();
                long.push(format!("{}: {name} ({len} lines)", f.strip_prefix(src()).unwrap().display()));
            }
        }
    }
    long
}

/// A command turns options into one library call and prints: no function in cmd/ over 60 lines.
#[test]
fn commands_are_thin() {
    let long = long_functions("cmd", 60);
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// The rule files read as named steps: no function of advise/ or experiment/ over 80 lines (their
/// unit tests' scenarios aside). A longer one is a decision with its parts not yet named.
#[test]
fn rules_are_named_steps() {
    let long: Vec<String> = ["advise", "experiment"].iter().flat_map(|d| long_functions(d, 80)).collect();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// Where `unsafe` may be: the door to the OS (`sys/`), the kernel loader (aya's ring buffer
/// registration) and the record decoder (reading the kernel's records as their C structs).
const UNSAFE_ALLOWED: &[&str] = &["sys/", "observe/kernel/loader.rs", "observe/event.rs"];

/// `unsafe` blocks, functions, impls and attributes only where [`UNSAFE_ALLOWED`] says, and each
/// block with a SAFETY note (clippy's `undocumented_unsafe_blocks` checks the notes; this the
/// places). Unit tests count too.
#[test]
fn unsafe_only_behind_the_doors() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut found = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src()).unwrap().to_string_lossy().into_owned();
        if UNSAFE_ALLOWED.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            let words = code.split(|c: char| !c.is_alphanumeric() && c != '_');
            if words.into_iter().any(|w| w == "unsafe") {
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "unsafe outside sys/, the loader and the decoder:\n{}", found.join("\n"));
}
