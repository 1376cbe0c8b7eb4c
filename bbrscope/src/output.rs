//! The one path to standard output for commands that print a report (apply, status, revert, and
//! any other that adopts it).
//!
//! `println!` panics when stdout cannot be written (a full disk, `> /dev/full`, a closed pipe),
//! which after `apply` has changed the machine leaves the user with a backtrace instead of what
//! was changed. Here a write error is a value: [`outln!`] returns `Result<(), OutputError>`, and
//! [`guard`] turns the result of a whole command into the documented exit:
//!
//! - the reader went away (EPIPE, e.g. `| head -1`): a quiet exit 0, as for other Unix tools;
//! - any other write error: one line on stderr and exit 1 (through `main`'s error path), saying
//!   first what had already been done when the command wraps the error with
//!   [`anyhow::Context`], e.g. "the change was made ...; `bbrscope revert` undoes it".
//!
//! Usage:
//!
//! ```ignore
//! use crate::output::{self, outln};
//!
//! pub fn run(args: Args) -> anyhow::Result<()> {
//!     output::guard(|| {
//!         outln!("{} flows", n)?;
//!         Ok(())
//!     })
//! }
//! ```

use std::{
    fmt,
    io::{self, Write as _},
};

/// Writing to standard output failed.
#[derive(Debug)]
pub(crate) struct OutputError(pub io::Error);

impl OutputError {
    /// The reader closed the pipe: nobody is left to tell, so the command ends quietly.
    pub(crate) fn is_closed_pipe(&self) -> bool {
        self.0.kind() == io::ErrorKind::BrokenPipe
    }
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writing to standard output: {}", self.0)
    }
}

/// No `source`: the message above already names the I/O error, which `{:#}` would repeat.
impl std::error::Error for OutputError {}

/// Writes formatted text to stdout. Used through [`out!`] and [`outln!`].
pub(crate) fn write_fmt(args: fmt::Arguments<'_>) -> Result<(), OutputError> {
    io::stdout().lock().write_fmt(args).map_err(OutputError)
}

/// Pushes out whatever stdout still buffers (a report that does not end in a newline), so its
/// error is seen here rather than lost at exit.
pub(crate) fn flush() -> Result<(), OutputError> {
    io::stdout().lock().flush().map_err(OutputError)
}

/// Writes a line to stderr. A failed write (stderr on a full disk, a pipe whose reader left) is
/// dropped: a diagnostic must never panic, as `eprintln!` does, nor stop the exporter or the
/// experiment it describes. Used through [`errln!`].
pub fn err_line(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// `eprintln!` that never panics: see [`err_line`].
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::err_line(format_args!($($arg)*))
    };
}
pub(crate) use errln;

/// Whether `e` (or anything it wraps) is a write to a closed pipe.
pub(crate) fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<OutputError>().is_some_and(OutputError::is_closed_pipe))
}

/// Runs a command's body and flushes stdout, mapping a closed pipe to success (exit 0, nothing
/// printed). Every other error, an [`OutputError`] included, is returned for `main` to print on
/// one line (exit 1, or 2 for a usage error).
pub(crate) fn guard(body: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    match body().and_then(|()| flush().map_err(anyhow::Error::from)) {
        Err(e) if is_closed_pipe(&e) => Ok(()),
        other => other,
    }
}

/// Makes sure a stop signal (SIGINT, SIGTERM) ends the process within `grace` even when stdout's
/// reader has stopped reading: a write to a full pipe blocks the thread, and with it (for
/// `stream`, once its output queue is full, or when it waits for the queue at the end) the
/// single-threaded runtime that would have seen the signal (the signal handler restarts the
/// write). A thread of its own hears the signal too; if the process is still there `grace`
/// later, it says so on stderr (if that can be written) and exits with status 1.
///
/// Only for commands whose cleanup the kernel does at exit (their BPF links and maps are file
/// descriptors): not for ones with something to undo in code (demo's namespaces, apply).
pub(crate) fn exit_when_stuck_after_signal(grace: std::time::Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    let watch = move || -> Option<()> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
        runtime.block_on(async {
            let (mut int, mut term) = (signal(SignalKind::interrupt()).ok()?, signal(SignalKind::terminate()).ok()?);
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            tokio::time::sleep(grace).await;
            Some(())
        })?;
        // stderr may be the same stalled pipe: the message gets a moment, not a veto.
        std::thread::spawn(|| {
            crate::output::errln!(
                "bbrscope: stopping on a signal, but standard output has not been read for a while: \
                 exiting without writing what is left"
            );
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::process::exit(1)
    };
    let _ = std::thread::Builder::new().name("stop-watch".into()).spawn(watch);
}

/// `print!` that returns `Result<(), OutputError>` instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_fmt(format_args!($($arg)*))
    };
}

/// `println!` that returns `Result<(), OutputError>` instead of panicking.
macro_rules! outln {
    () => {
        $crate::output::write_fmt(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_pipe_is_found_through_context() {
        let e =
            anyhow::Error::from(OutputError(io::Error::from(io::ErrorKind::BrokenPipe))).context("the change was made");
        assert!(is_closed_pipe(&e));
        let full = anyhow::Error::from(OutputError(io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(!is_closed_pipe(&full));
        assert!(full.to_string().starts_with("writing to standard output: "), "{full}");
    }

    #[test]
    fn guard_passes_other_errors_and_swallows_a_closed_pipe() {
        assert!(guard(|| Err(OutputError(io::Error::from(io::ErrorKind::BrokenPipe)).into())).is_ok());
        assert!(guard(|| anyhow::bail!("boom")).is_err());
    }
}
