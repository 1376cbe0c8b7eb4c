//! `--kernel-log`: the kernel programs' rare events (aya-log records), one stderr line each.
//!
//! The programs send a record only at the level the loader set ([`super::loader::Options`]'s
//! `kernel_log`); at 0, the default, the level is a constant of the loaded program and the
//! verifier removes every log call as dead code, and their ring is one page. The records wait in
//! that ring of their own ([`RING`], 128 KiB when on: a burst beyond it is dropped, never the
//! observer's records) until the observer's loop drains its own ring, at least every 50 ms.

use aya::Ebpf;
use aya_log::EbpfLogger;

/// aya-log's ring in the programs' object.
pub(crate) const RING: &str = "AYA_LOGS";

/// The size of [`RING`] for `level`: aya-log's own 128 KiB when the programs log, one page
/// (the least a ring can be) when nothing can be written to it.
pub(crate) fn ring_bytes(level: u8) -> u32 {
    if level == 0 { rustix::param::page_size() as u32 } else { 128 << 10 }
}

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
