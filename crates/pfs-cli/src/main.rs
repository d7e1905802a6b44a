//! `pfs`: PacketFS command-line entry point. Parses arguments, dispatches to
//! one module per subcommand, and maps outcomes to exit codes.

mod args;
mod command;
mod config;
mod exit;

use clap::Parser;

fn main() {
    let cli = args::Cli::parse();
    let code = match command::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pfs: error: {}", exit::describe(&e));
            exit::classify(&e)
        }
    };
    std::process::exit(code);
}
