use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use reconciler_host::cli::{Cli, Command, LogFormat, run};
use reconciler_host::process::traces::{TraceConfig, Traces};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `dev` prints its own line per event and `plan` its report; their log
    // shows only what goes wrong.
    // sigstore warns of every signature source it finds empty (a registry
    // without the referrers API, a digest not signed); the host says what
    // that means for the plugin itself.
    let default_filter = if matches!(cli.command, Command::Dev(_) | Command::Plan(_)) {
        "warn,sigstore=error"
    } else {
        "info,sigstore=error"
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // Colour only for a person at a terminal: `kubectl logs`, files and
    // pipes get plain text. NO_COLOR (no-color.org) turns it off there too.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    // Built before the runtime: its HTTP client blocks, on its own thread.
    let traces = match TraceConfig::from_args(cli.otlp_endpoint.as_deref(), cli.otlp_sample_ratio)
        .map(|config| Traces::start(&config))
        .transpose()
    {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let logs = match cli.log_format {
        LogFormat::Text => logs.with_filter(filter).boxed(),
        // Spans' fields (plugin, kind, namespace, name) ride along on each line.
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces.as_ref().map(Traces::layer))
        .init();
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    };
    if let Some(traces) = traces {
        traces.shutdown();
    }
    code
}
