//! The machine and code a benchmark ran on, for the report's heading.

use std::{fs, path::Path, process::Command};

use serde::Serialize;

#[derive(Debug, Serialize)]
pub(crate) struct Machine {
    pub date_utc: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cores: usize,
    pub memory_gib: f64,
    /// Whether the CPU reports running under a hypervisor.
    pub virtual_machine: bool,
    /// bbrscope's commit, with "+changes" when the work tree differs from it.
    pub commit: String,
    pub bbrscope: String,
    pub bpftrace: Option<String>,
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Machine {
    pub(crate) fn describe(root: &Path, bbrscope: &Path) -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        let git = |args: &[&str]| {
            // Read-only: no index refresh or lock on a work tree others are using.
            let mut cmd = Command::new("git");
            cmd.args(args).current_dir(root).env("GIT_OPTIONAL_LOCKS", "0");
            cmd
        };
        let commit = output(&mut git(&["rev-parse", "--short=12", "HEAD"])).unwrap_or_else(|| "unknown".into());
        let clean = git(&["diff-index", "--quiet", "HEAD", "--"]).status().is_ok_and(|s| s.success());
        Machine {
            date_utc: output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])).unwrap_or_default(),
            kernel: fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
            cpu_model: cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
                .unwrap_or_default(),
            cores: std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
            memory_gib: mem_kib / f64::from(1 << 20),
            virtual_machine: cpuinfo
                .lines()
                .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor")),
            commit: if clean { commit } else { format!("{commit}+changes") },
            bbrscope: output(Command::new(bbrscope).arg("--version")).unwrap_or_default(),
            bpftrace: output(Command::new("bpftrace").arg("--version")),
        }
    }
}
