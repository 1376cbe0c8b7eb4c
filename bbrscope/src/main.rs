use std::{io::IsTerminal as _, process::ExitCode};

use bbrscope::{
    cli::{Cli, Command},
    cmd,
    error::UsageError,
};
use clap::Parser as _;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bbrscope: error: starting the async runtime: {e}");
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
            Some(Command::Revert(args)) => cmd::revert::run(args),
            Some(Command::Export(args)) => cmd::export::run(args).await,
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
        Err(e) => match e.downcast_ref::<UsageError>() {
            Some(u) => {
                eprintln!("bbrscope: {u}");
                ExitCode::from(2)
            }
            None => {
                eprintln!("bbrscope: error: {e:#}");
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
            eprintln!("bbrscope: {} (see bbrscope --help)", bbrscope::error::one_line(&e.render().to_string()));
            ExitCode::from(2)
        }
    }
}
