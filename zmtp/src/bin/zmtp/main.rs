//! `zmtp`: a netcat for ZeroMQ, for debugging a network of ZeroMQ processes. Open a socket of any
//! type, bind or connect it, send messages from the command line or stdin and print what arrives;
//! `zmtp proxy` forwards between two sockets with an optional capture. `zmtp --help` tells the rest.

mod cli;
mod error;
mod frames;
mod help;
mod input;
mod proxy;
mod run;
mod setup;

use crate::cli::Invocation;
use crate::error::CliError;

fn main() {
    let code = match execute() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("zmtp: {e}");
            if let CliError::Usage(_) = e {
                eprintln!("(zmtp --help explains the options)");
            }
            e.exit_code()
        }
    };
    // Exit at once: a thread may still be blocked reading stdin.
    std::process::exit(code);
}

fn execute() -> Result<(), CliError> {
    let invocation = cli::parse()?;
    init_tracing(&invocation);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| error::failed(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async {
        match invocation {
            Invocation::Socket(t, args) => run::run(t, *args).await,
            Invocation::Proxy(args) => proxy::run(args).await,
            Invocation::Keygen => {
                zmtp::security::print_keygen(&zmtp::security::KeyPair::generate());
                Ok(())
            }
        }
    })
}

/// `RUST_LOG` (e.g. `RUST_LOG=debug`) controls tracing on stderr; warnings show by default. With
/// `-v` the connection events are printed as lines of their own, so zmtp's warnings about the same
/// connections would say everything twice: only errors are logged then.
fn init_tracing(invocation: &Invocation) {
    let verbose = match invocation {
        Invocation::Socket(_, args) => args.verbose,
        Invocation::Proxy(args) => args.verbose,
        Invocation::Keygen => false,
    };
    zmtp::logging::init(if verbose { "error" } else { "warn" }, false);
}
