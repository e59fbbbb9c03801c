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
    init_tracing();
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| error::failed(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async {
        match invocation {
            Invocation::Socket(t, args) => run::run(t, *args).await,
            Invocation::Proxy(args) => proxy::run(args).await,
            Invocation::Keygen => {
                let keys = zmtp::security::KeyPair::generate();
                println!("public: {}\nsecret: {}", keys.public_z85(), keys.secret_z85());
                Ok(())
            }
        }
    })
}

/// `RUST_LOG` (e.g. `RUST_LOG=debug`) controls tracing on stderr; warnings show by default.
fn init_tracing() {
    zmtp::logging::init("warn", false);
}
