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
            let settings = cli
                .settings
                .clone()
                .traces_from_env()
                .context("tracing (the OTEL_* variables)")?;
            if let Some(t) = &settings.telemetry {
                // Without its query: a collector's key may ride in one.
                let endpoint = format!(
                    "{}://{}{}",
                    t.endpoint.scheme_str().unwrap_or("http"),
                    t.endpoint.authority().map_or("", |a| a.as_str()),
                    t.endpoint.path()
                );
                tracing::info!(%endpoint, "tracing on: spans exported over OTLP/HTTP");
            }
            let app = muster::build(&settings)?;
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
        Command::RetentionPass => {
            let r = muster::retention_pass(&cli.settings).await?;
            println!(
                "retention pass: {} finished items and {} leases removed, {} edit texts removed{}",
                r.items,
                r.leases,
                r.edit_texts,
                if r.groups_left > 0 {
                    format!(
                        "; {} groups left to the next pass (rows held by other transactions)",
                        r.groups_left
                    )
                } else {
                    String::new()
                }
            );
        }
        Command::Solve {
            challenge,
            difficulty,
        } => {
            let nonce = muster_antispam::solve(&challenge, difficulty, u64::MAX)
                .context("no nonce found")?;
            println!("{nonce}");
        }
        Command::LedgerVerify {
            archive: Some(path),
            ..
        } => match muster::verify_archive(&path) {
            Ok((header, entries)) => println!(
                "archive verified: {entries} entries after checkpoint {} up to checkpoint {}, \
                 every entry hash and {} checkpoint digests matching",
                muster_pg::checkpoint_text(&header.from),
                muster_pg::checkpoint_text(&header.until()),
                header.checkpoints.len()
            ),
            Err(e) => fail("ledger-verify", &e),
        },
        Command::LedgerArchive { to, until, from } => {
            match muster::ledger_archive(&cli.settings, &to, &from, &until).await {
                Ok(entries) => println!("{entries} ledger entries archived to {}", to.display()),
                Err(e) => fail("ledger-archive", &e),
            }
        }
        Command::LedgerPrune { archive } => {
            match muster::ledger_prune(&cli.settings, &archive).await {
                Ok(p) => println!(
                    "{} ledger entries after checkpoint {} up to checkpoint {} removed from Logbook{}; \
                 archived boundary {}",
                    p.deleted,
                    p.from.seq,
                    p.through.seq,
                    match (p.resumed, p.deleted) {
                        (false, _) => "",
                        (true, 0) => " (already pruned)",
                        (true, _) => " (a prune stopped before its end, taken up again)",
                    },
                    muster_pg::checkpoint_text(&p.through)
                ),
                Err(e) => fail("ledger-prune", &e),
            }
        }
        Command::LedgerVerify {
            head,
            against,
            since,
            archive: None,
        } => {
            let check = muster::LedgerCheck {
                head,
                against,
                since,
            };
            match muster::ledger_verify_with(&cli.settings, &check).await {
                Ok((report, head)) => print_ledger_report(&check, &report, head),
                Err(e) => fail("ledger-verify", &e),
            }
        }
    }
    Ok(())
}

fn print_ledger_report(
    check: &muster::LedgerCheck,
    report: &muster_pg::LedgerReport,
    head: Option<muster_pg::LedgerHead>,
) {
    let scope = match &check.since {
        Some(since) => format!("since checkpoint {since}: "),
        None => String::new(),
    };
    let latest = match &report.latest_checkpoint {
        Some(c) => format!("; latest checkpoint {}", muster_pg::checkpoint_text(c)),
        None => "; no checkpoint yet".to_owned(),
    };
    let summary = format!(
        "ledger verified {scope}{} subjects, {} entries, {} checkpoints, every chain intact{}{latest}",
        report.subjects,
        report.entries,
        report.checkpoints,
        if check.against.is_some() {
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

/// An operator's command failed: one line and exit 1, never a backtrace, whatever
/// RUST_BACKTRACE says.
fn fail(command: &str, e: &anyhow::Error) -> ! {
    eprintln!("{command}: {e:#}");
    std::process::exit(1);
}
