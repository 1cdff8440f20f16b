use anyhow::Context;
use clap::Parser;
use muster::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            // The current span (the request id) is kept; the list of all spans repeated it.
            .with_span_list(false)
            .init(),
        LogFormat::Pretty => builder.init(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.settings.log_format);
    match cli.command.unwrap_or(Command::Serve) {
        Command::Ops(command) => {
            // A client of the API: it prints its answers and errors itself, with its exit code.
            let exit = muster_ops::run(command, &cli.ops).await;
            std::process::exit(exit.code());
        }
        Command::Serve => {
            let app = muster::build(&cli.settings)?;
            let listener = tokio::net::TcpListener::bind(cli.settings.listen)
                .await
                .with_context(|| format!("bind {}", cli.settings.listen))?;
            tracing::info!(listen = %listener.local_addr()?, "muster serving");
            muster::serve(app, listener, muster::termination()).await?;
            tracing::info!("muster stopped");
        }
        Command::Migrate => {
            let applied = muster::migrate(&cli.settings).await?;
            tracing::info!(?applied, "migrations done");
        }
        Command::Solve {
            challenge,
            difficulty,
        } => {
            let nonce = muster_antispam::solve(&challenge, difficulty, u64::MAX)
                .context("no nonce found")?;
            println!("{nonce}");
        }
        Command::LedgerVerify { head, against } => {
            let (report, head) =
                muster::ledger_verify_with(&cli.settings, head, against.as_deref()).await?;
            let summary = format!(
                "ledger verified: {} subjects, {} entries, every chain intact{}",
                report.subjects,
                report.entries,
                if against.is_some() {
                    "; the ledger up to the recorded head still hashes to its digest"
                } else {
                    ""
                }
            );
            match head {
                // The head alone on stdout, to be recorded elsewhere.
                Some(head) => {
                    eprintln!("{summary}");
                    println!("{head}");
                }
                None => println!("{summary}"),
            }
        }
    }
    Ok(())
}
