//! Catalogs that announce their changes: a SeaweedFS `weed mini` of its own (its filer webhook
//! is configured when it starts, so each test that needs one gets one), and Debian's
//! nats-server with JetStream, both on free loopback ports.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, token, unique, Api, PREFIX};

/// A file holding a webhook token.
pub struct TokenFile(pub PathBuf);

impl TokenFile {
    pub fn new(token: &str) -> TokenFile {
        let path = std::env::temp_dir().join(unique("events-token"));
        std::fs::write(&path, format!("{token}\n")).expect("token file written");
        TokenFile(path)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 path")
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A SeaweedFS of its own, whose filer POSTs every change to `webhook` (if any) with `token`.
pub struct Weed {
    child: Child,
    dir: PathBuf,
    /// The Iceberg REST catalog (`http://127.0.0.1:PORT`).
    pub iceberg: String,
}

impl Weed {
    pub async fn start(webhook: Option<(&str, &str)>) -> Weed {
        let dir = std::env::temp_dir().join(unique("weed"));
        std::fs::create_dir_all(dir.join("data")).expect("weed directory");
        if let Some((url, token)) = webhook {
            std::fs::write(
                dir.join("notification.toml"),
                format!(
                    "[notification.webhook]\nenabled = true\nendpoint = \"{url}\"\n\
                     bearer_token = \"{token}\"\n"
                ),
            )
            .expect("notification.toml written");
        }
        let iceberg = free_port();
        let port = |name: &str| format!("-{name}={}", free_port());
        let weed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".test-env/venv/bin/weed");
        let child = Command::new(weed)
            .current_dir(&dir)
            .env("AWS_ACCESS_KEY_ID", "admin")
            .env("AWS_SECRET_ACCESS_KEY", "adminsecret")
            .args([
                "mini",
                "-dir=data",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-tableBucket=warehouse",
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.lance=0",
                "-master.telemetry=false",
                &format!("-s3.port.iceberg={iceberg}"),
            ])
            .args(
                [
                    "master.port",
                    "master.port.grpc",
                    "volume.port",
                    "volume.port.grpc",
                    "filer.port",
                    "filer.port.grpc",
                    "s3.port",
                    "s3.port.grpc",
                    "admin.port",
                    "admin.port.grpc",
                ]
                .map(port),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("weed starts (scripts/test-env.sh installs it)");
        let weed = Weed {
            child,
            dir,
            iceberg: format!("http://127.0.0.1:{iceberg}"),
        };
        weed.wait_ready().await;
        weed
    }

    async fn wait_ready(&self) {
        let client = reqwest::Client::new();
        for _ in 0..240 {
            if let Ok(api) = tokio::time::timeout(Duration::from_secs(2), self.api()).await {
                let listed = client
                    .get(format!("{}/namespaces", api.base))
                    .bearer_auth(&api.token)
                    .send()
                    .await;
                if listed.is_ok_and(|r| r.status().is_success()) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("weed mini did not serve its catalog within a minute");
    }

    /// A client of this SeaweedFS's catalog itself (writes that bypass icecache).
    pub async fn api(&self) -> Api {
        let token = try_token(&self.iceberg).await;
        Api {
            http: reqwest::Client::new(),
            base: format!("{}/v1/{PREFIX}", self.iceberg),
            token,
        }
    }
}

async fn try_token(base: &str) -> String {
    // `token` panics on a catalog that does not answer yet; ask first.
    let up = reqwest::Client::new()
        .post(format!("{base}/v1/oauth/tokens"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "admin"),
            ("client_secret", "adminsecret"),
        ])
        .send()
        .await;
    match up {
        Ok(r) if r.status().is_success() => token(base).await,
        _ => std::future::pending().await,
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A nats-server with JetStream on a free port; killed when dropped.
pub struct Nats {
    child: Option<Child>,
    dir: PathBuf,
    pub port: u16,
}

impl Nats {
    pub async fn start() -> Nats {
        let mut nats = Nats::not_started();
        nats.restart().await;
        nats
    }

    /// A port where no server runs yet (`restart` starts one there).
    pub fn not_started() -> Nats {
        Nats {
            child: None,
            dir: std::env::temp_dir().join(unique("nats")),
            port: free_port(),
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again) on its port, with the same JetStream store.
    pub async fn restart(&mut self) {
        let binary = std::env::var("ICECACHE_NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
        let child = Command::new(&binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{binary} starts (scripts/test.sh installs Debian's nats-server): {e}")
            });
        self.child = Some(child);
        for _ in 0..400 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("nats-server did not listen on {}", self.port);
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server without closing its connections (SIGSTOP: a hung server).
    pub fn freeze(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-STOP", &child.id().to_string()])
                .status();
        }
    }

    pub fn thaw(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
    }

    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url())
            .await
            .expect("a NATS client connects")
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.thaw();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
