use std::{
    io::IsTerminal as _,
    process::ExitCode,
    sync::atomic::{AtomicBool, Ordering},
};

use bbrscope::{
    cli::{Cli, Command},
    cmd,
    error::UsageError,
};
use clap::Parser as _;

/// The shipped (static, musl) binary's allocator: musl's own made every observed flow cost about
/// half as much CPU again as glibc's; mimalloc costs what glibc's does (README, "Install").
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc as a long-running, mostly idle observer on a small server wants it: freed memory goes
/// back to the kernel at once, and its arenas are committed as used, not up front. With its
/// defaults (a second's delay, eager commit) `stream` held 77 MB resident where the glibc build
/// holds 31 (measured: README, "Install"); with these, 17 MB. The option numbers are those of the
/// mimalloc the sys crate bundles (v3's `mi_option_e`); each is set only while it holds its
/// documented default, so a renumbered option, or one the administrator set with its
/// `MIMALLOC_*` environment variable, is left alone.
#[cfg(target_env = "musl")]
fn allocator_settings() {
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    for (option, default, want) in [(ARENA_EAGER_COMMIT, 2, 0), (PURGE_DELAY, 1000, 0)] {
        // SAFETY: mi_option_get and mi_option_set read and store one number in mimalloc's option
        // table; any option number is accepted (out of range is ignored).
        unsafe {
            if libmimalloc_sys::mi_option_get(option) == default {
                libmimalloc_sys::mi_option_set(option, want);
            }
        }
    }
}

/// Whether standard output was closed when the process started (`bbrscope status >&-`).
/// Rust's runtime reopens closed standard descriptors on /dev/null before `main`, after which
/// every write would succeed unseen, so this is noted earlier, by a constructor.
static STDOUT_CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

extern "C" fn note_closed_stdout() {
    // SAFETY: fcntl(F_GETFD) only reads the process's descriptor table; no memory is passed.
    let closed = unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFD) } == -1;
    STDOUT_CLOSED_AT_START.store(closed, Ordering::Relaxed);
}

// SAFETY: the constructor runs before main, single-threaded, and touches only an atomic and a
// descriptor query; glibc calls .init_array entries before the Rust runtime's own start-up.
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

/// A line on stderr that never panics (the library's `errln!`): an error report must not turn
/// into a panic when stderr is a full disk or a closed pipe.
macro_rules! errln {
    ($($arg:tt)*) => {
        bbrscope::output::err_line(format_args!($($arg)*))
    };
}

fn main() -> ExitCode {
    #[cfg(target_env = "musl")]
    allocator_settings();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    // Every command but the exporter (a service: its output is the HTTP endpoint) writes its
    // result to stdout. With stdout closed that result would vanish, so refuse before anything
    // is attached or changed, as coreutils fail on a closed stdout.
    if STDOUT_CLOSED_AT_START.load(Ordering::Relaxed) && !matches!(cli.command, Some(Command::Export(_))) {
        errln!(
            "bbrscope: standard output is closed (>&-); nothing was done (to discard the output, redirect it to /dev/null)"
        );
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("bbrscope: error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Some(Command::Stream(args)) => cmd::stream::run(args).await,
            Some(Command::Top(args)) => cmd::top::run(args).await,
            Some(Command::Replay(args)) => cmd::replay::run(args).await,
            Some(Command::Demo(args)) => cmd::demo::run(args).await,
            Some(Command::Experiment(args)) => cmd::experiment::run(args).await,
            Some(Command::Apply(args)) => cmd::apply::run(args),
            Some(Command::Status(args)) => cmd::status::run(args),
            Some(Command::Advise(args)) => cmd::advise::run(args).await,
            Some(Command::Revert(args)) => cmd::revert::run(args),
            Some(Command::Export(args)) => cmd::export::run(args).await,
            Some(Command::Man(args)) => cmd::docs::man(&args),
            Some(Command::Completions(args)) => cmd::docs::completions(&args),
            // Plain `bbrscope`: the dashboard on a terminal, the JSON stream into a pipe.
            None => {
                let sub = if std::io::stdout().is_terminal() { "top" } else { "stream" };
                match Cli::parse_from(["bbrscope", sub]).command {
                    Some(Command::Top(args)) => cmd::top::run(args).await,
                    Some(Command::Stream(args)) => cmd::stream::run(args).await,
                    _ => unreachable!("parsed a fixed subcommand"),
                }
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<bbrscope::error::Exit>().is_some() => {
            ExitCode::from(e.downcast_ref::<bbrscope::error::Exit>().map_or(1, |x| x.0))
        }
        Err(e) => match e.downcast_ref::<UsageError>() {
            Some(u) => {
                errln!("bbrscope: {u}");
                ExitCode::from(2)
            }
            None => {
                errln!("bbrscope: error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Help and version go to stdout (exit 0); usage errors become one line on stderr (exit 2).
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            // The help of the subcommand that was given, which is where the right spelling is.
            let sub = std::env::args().skip(1).find(|a| !a.starts_with('-')).filter(|a| {
                <Cli as clap::CommandFactory>::command().get_subcommands().any(|s| s.get_name() == a.as_str())
            });
            let help = sub.map_or("bbrscope --help".to_string(), |s| format!("bbrscope {s} --help"));
            errln!("bbrscope: {} (see {help})", bbrscope::error::one_line(&e.render().to_string()));
            ExitCode::from(2)
        }
    }
}
