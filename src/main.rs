use std::process::ExitCode;

use clap::Parser;
use icecache::config::{self, Cli, Command, Settings, EXIT_CONFIG};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Probe { url }) = &cli.command {
        return match icecache::probe::probe(url) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("icecache probe: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(Command::CheckConfig { file }) = cli.command {
        let checked = Settings::from_file(&file).and_then(|s| s.overlay(cli.settings).validate());
        return match checked {
            Ok(config) => {
                print!(
                    "{} is valid; effective settings:\n{}",
                    file.display(),
                    config.describe()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("icecache: {e}");
                ExitCode::from(EXIT_CONFIG as u8)
            }
        };
    }
    let cli_settings = cli.settings.clone();
    let config = match config::load(cli.settings) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("icecache: {e}");
            return ExitCode::from(EXIT_CONFIG as u8);
        }
    };
    let set_log_level = icecache::logging::init(&config);
    // This thread's runtime serves the admin port and one proxy worker; `run` starts the others.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("icecache: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown signal received; draining");
            let _ = stop.send(true);
        });
        let reload = icecache::Reload {
            cli: cli_settings,
            set_log_level,
        };
        match icecache::run(config, Some(reload), stopped).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("icecache: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
