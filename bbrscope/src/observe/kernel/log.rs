//! `--kernel-log`: the kernel programs' rare events (aya-log records), one stderr line each.
//!
//! The programs send a record only at the level the loader set ([`super::loader::Options`]'s
//! `kernel_log`); at 0, the default, the level is a constant of the loaded program and the
//! verifier removes every log call as dead code. The records wait in their own ring (aya-log's
//! `AYA_LOGS`, 128 KiB: a burst beyond it is dropped, never the observer's records) until the
//! observer's loop drains its own ring, which it does at least every 50 ms.

use aya::Ebpf;
use aya_log::EbpfLogger;

/// Writes each record as `bbrscope: kernel LEVEL: MESSAGE` through the one stderr path.
pub(crate) struct Lines;

impl log::Log for Lines {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }

    fn log(&self, record: &log::Record) {
        let level = record.level().as_str().to_ascii_lowercase();
        crate::output::errln!("bbrscope: kernel {level}: {}", record.args());
    }

    fn flush(&self) {}
}

/// The reader of `ebpf`'s log records, or why there is none.
pub(crate) fn reader(ebpf: &mut Ebpf) -> Result<EbpfLogger<Lines>, String> {
    EbpfLogger::init_with_logger(ebpf, Lines)
        .map_err(|e| format!("--kernel-log: the kernel programs' log cannot be read ({e})"))
}
