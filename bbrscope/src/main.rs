use std::{io::IsTerminal as _, process::ExitCode};

use bbrscope::{
    cli::{Cli, Command},
    cmd,
    error::UsageError,
};
use clap::Parser as _;

/// The shipped (static, musl) binary's allocator: musl's own made every observed flow cost about
/// half as much CPU again as glibc's; mimalloc costs what glibc's does (README, "Install"), with
/// the settings of `sys::start::allocator_settings`.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A line on stderr that never panics (the library's `errln!`): an error report must not turn
/// into a panic when stderr is a full disk or a closed pipe.
macro_rules! errln {
    ($($arg:tt)*) => {
        bbrscope::output::err_line(format_args!($($arg)*))
    };
}

fn main() -> ExitCode {
    #[cfg(target_env = "musl")]
    bbrscope::sys::start::allocator_settings();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    // Every command but the exporter (a service: its output is the HTTP endpoint) writes its
    // result to stdout. With stdout closed that result would vanish, so refuse before anything
    // is attached or changed, as coreutils fail on a closed stdout.
    if bbrscope::sys::start::stdout_closed_at_start() && !matches!(cli.command, Some(Command::Export(_))) {
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
            Some(Command::Experiment(args)) => cmd::experiment::run(*args).await,
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
