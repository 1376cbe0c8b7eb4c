//! The kernel matrix must catch what it claims to catch. `cargo xtask kernels --break host-btf`
//! makes bbrscope in the guest read the kernel types (struct offsets, tracepoint arguments) of
//! this machine's kernel instead of the guest's, as a tool with offsets fixed on its build
//! machine would. This machine's kernel is not Debian's (another build, another configuration),
//! so on Debian's 6.18, which otherwise passes every check, two layers must catch it: bbrscope's
//! start-up check (the BTF's socket sizes against the kernel's slab caches) must refuse to start,
//! and where the kernel cannot tell (the guest hides its slab sizes), bbrscope attaches and reads
//! the socket at wrong offsets: the matrix must then fail on its data checks against TCP_INFO and
//! `ss` (not on a boot problem). One guest boot, about a minute under QEMU TCG. Needs root, QEMU
//! and Debian's archive, as `cargo xtask kernels` does (`make test` runs both).

use std::{fs, path::PathBuf, process::Command};

#[test]
fn host_offsets_fail_the_data_checks_on_6_18() {
    // A matrix `make test` runs beside the suite (scripts/beside-matrix.sh holds this lock while
    // it runs) boots 6.18 in the same work directory: this waits for it to end.
    if let Ok(lock) = fs::File::open(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kernel-matrix.lock")) {
        lock.lock_shared().expect("waiting for the kernel matrix's lock");
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_xtask"));
    let md = std::env::temp_dir().join(format!("bbrscope-kernel-break-{}.md", std::process::id()));
    let out = Command::new(&exe)
        // bbrscope as the matrix builds it (static, release: the build the matrix and the package
        // tests share).
        .args(["kernels", "--kernel", "6.18", "--break", "host-btf", "--markdown"])
        .arg(&md)
        .output()
        .expect("running xtask kernels");
    let report = fs::read_to_string(&md).unwrap_or_default();
    let _ = fs::remove_file(&md);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let host = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    assert!(
        !out.status.success(),
        "the matrix passed with this machine's kernel types (Linux {}) on Debian's 6.18; if this \
         machine runs that very kernel build, the break breaks nothing:\n{report}\n{stderr}",
        host.trim()
    );
    assert!(!report.contains("guest error"), "the guest did not run its checks:\n{report}\n{stderr}");
    let failed: Vec<&str> =
        report.lines().filter_map(|l| l.strip_prefix("- **FAIL** `")).filter_map(|l| l.split('`').next()).collect();
    // bbrscope's own start-up check refuses that BTF (the two kernels' socket sizes differ) ...
    assert!(report.contains("- pass `break/refused`"), "bbrscope accepted another kernel's BTF:\n{report}\n{stderr}");
    // ... and where the kernel cannot tell (its slab sizes hidden), the checks that compare the
    // fields read at those offsets with the kernel's own numbers fail.
    for check in ["auto/cubic_vs_kernel", "auto/cubic_close", "auto/bbr_vs_kernel", "auto/bbr_close"] {
        assert!(failed.contains(&check), "{check} passed with wrong offsets; failed: {failed:?}\n{report}");
    }
}
