//! Log output: one line per request at info (the access log), as text or JSON; the filter can
//! be changed while running (SIGHUP reload).

use serde::Deserialize;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter, Registry};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Changes the log filter of the running process.
pub type SetLogLevel = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Installs the subscriber; `level` was validated with the rest of the configuration.
pub fn init(format: LogFormat, level: &str) -> SetLogLevel {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::<EnvFilter, Registry>::new(filter);
    // Colour codes only for a person at a terminal, never into a log file or collector.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr))
            .try_init(),
    };
    Box::new(move |level: &str| {
        let filter = EnvFilter::try_new(level).map_err(|e| e.to_string())?;
        handle.reload(filter).map_err(|e| e.to_string())
    })
}
