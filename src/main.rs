use std::process::ExitCode;

use icecache::admin::probe;
use icecache::config::{self, Command, Parsed, EXIT_CONFIG};
use icecache::telemetry::logging;

fn main() -> ExitCode {
    let cli = match config::parse(std::env::args_os()) {
        Parsed::Run(cli) => cli,
        Parsed::Exit { code, message } => {
            if code == 0 {
                print!("{message}");
            } else {
                eprint!("{message}");
            }
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Keys { toml } => {
            if toml {
                print!("{}", config::reference::example_file());
            } else {
                print!("{}", config::reference::table());
            }
            ExitCode::SUCCESS
        }
        Command::Probe { url } => match probe::probe(&url) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("icecache probe: {e}");
                ExitCode::FAILURE
            }
        },
        Command::CheckConfig { file } => match config::check_file(file.clone(), &cli.settings) {
            Ok(settings) => {
                print!(
                    "{} is valid; effective settings:\n{}",
                    file.display(),
                    settings.describe()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("icecache: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        },
        Command::Run => serve(cli.settings),
    }
}

fn serve(cli: config::Raw) -> ExitCode {
    let settings = match config::load(&cli) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("icecache: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let set_log_level = logging::init(settings.log_format, &settings.log_level);
    // This thread's runtime serves the admin port, signals and reloads; `run` starts the
    // proxy workers on threads of their own.
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
        let reload = icecache::Reload { cli, set_log_level };
        match icecache::run(settings, Some(reload), stopped).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("icecache: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let ctrl_c = tokio::signal::ctrl_c();
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
