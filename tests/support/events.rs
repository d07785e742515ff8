//! Catalogs that announce their changes: a SeaweedFS `weed mini` of its own (its filer webhook
//! is configured when it starts, so each test that needs one gets one), and Debian's
//! nats-server with JetStream, both on loopback ports of the suite's range (`ports`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{ports, try_token, unique, until_serving, Api, ConfigFile, PREFIX};

/// A file holding a webhook token (a temporary text file, removed when dropped).
pub fn token_file(token: &str) -> ConfigFile {
    ConfigFile::new(&format!("{token}\n"))
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
        match Weed::try_start(webhook).await {
            Ok(weed) => weed,
            Err(log) => panic!("weed mini did not start; its log ends:\n{log}"),
        }
    }

    async fn try_start(webhook: Option<(&str, &str)>) -> Result<Weed, String> {
        // Beside the suite's own SeaweedFS (scripts/seaweedfs.sh: on tmpfs when there is room,
        // so a full disk does not take the volume slots away).
        let root = std::env::var_os("ICECACHE_TEST_WEED_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = root.join(unique("weed"));
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
        let iceberg = ports::reserved();
        let port = |name: &str| format!("-{name}={}", ports::reserved());
        let binary = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".test-env/venv/bin/weed");
        let log = std::fs::File::create(dir.join("weed.log")).expect("weed log");
        let child = Command::new(binary)
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
                // The smallest volume weed mini picks on its own: more slots from the same
                // free space.
                "-master.volumeSizeLimitMB=64",
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
            .stderr(log)
            .spawn()
            .expect("weed starts (scripts/test-env.sh installs it)");
        let mut weed = Weed {
            child,
            dir,
            iceberg: format!("http://127.0.0.1:{iceberg}"),
        };
        if weed.wait_ready().await {
            return Ok(weed);
        }
        Err(std::fs::read_to_string(weed.dir.join("weed.log")).unwrap_or_default())
    }

    /// Whether the catalog serves within 30 s; false at once if weed exits.
    async fn wait_ready(&mut self) -> bool {
        let client = reqwest::Client::new();
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if let Ok(api) = tokio::time::timeout(Duration::from_secs(1), self.api()).await {
                let listed = client
                    .get(format!("{}/namespaces", api.base))
                    .bearer_auth(&api.token)
                    .timeout(Duration::from_secs(1))
                    .send()
                    .await;
                if listed.is_ok_and(|r| r.status().is_success()) {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = std::fs::read_to_string(self.dir.join("weed.log")).unwrap_or_default();
        panic!("weed mini did not serve its catalog within 30 s; its log:\n{log}");
    }

    /// A client of this SeaweedFS's catalog itself (writes that bypass icecache).
    pub async fn api(&self) -> Api {
        // Waits while the catalog does not answer yet (callers bound the wait).
        let Some(token) = try_token(&self.iceberg).await else {
            return std::future::pending().await;
        };
        Api {
            http: reqwest::Client::new(),
            base: format!("{}/v1/{PREFIX}", self.iceberg),
            token,
        }
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A nats-server with JetStream on a port of the suite's range; killed when dropped.
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
            port: ports::reserved(),
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again) on its port, with the same JetStream store.
    pub async fn restart(&mut self) {
        assert!(
            self.try_spawn().await,
            "nats-server did not listen on {}",
            self.port
        );
    }

    async fn try_spawn(&mut self) -> bool {
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
        let port = self.port;
        until_serving(&mut self.child, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await
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

// What the events tests ask of icecache and of the catalog behind it.

/// A loadTable through `server`: status, metadata-location and x-cache.
pub async fn load(api: &Api, server: &str, namespace: &str, table: &str) -> (u16, String, String) {
    let response = api
        .http
        .get(format!(
            "{server}/v1/warehouse/namespaces/{namespace}/tables/{table}"
        ))
        .bearer_auth(&api.token)
        .send()
        .await
        .expect("load sent");
    let status = response.status().as_u16();
    let cache = response
        .headers()
        .get("x-cache")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body: Value = response.json().await.unwrap_or_default();
    let location = body["metadata-location"].as_str().unwrap_or("").to_owned();
    (status, location, cache)
}

/// Loads the table through `server` until it serves `location` (every answer a 200), and says
/// how long after `since` that was; fails after 5 s, naming `what` was not seen.
pub async fn until_served(
    api: &Api,
    server: &str,
    (namespace, table): (&str, &str),
    location: &str,
    since: Instant,
    what: &str,
) -> Duration {
    loop {
        let (status, now, _) = load(api, server, namespace, table).await;
        assert_eq!(status, 200, "{what}");
        if now == location {
            return since.elapsed();
        }
        assert!(since.elapsed() < super::PATIENCE, "{what} never seen");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A commit made to the catalog directly; returns the new metadata-location.
pub async fn commit(api: &Api, namespace: &str, table: &str, n: usize) -> String {
    let response = api
        .post(
            &format!("/namespaces/{namespace}/tables/{table}"),
            serde_json::json!({
                "requirements": [],
                "updates": [{ "action": "set-properties", "updates": { "n": n.to_string() } }]
            }),
        )
        .send()
        .await
        .expect("commit sent");
    assert_eq!(response.status(), 200, "a direct commit");
    let body: Value = response.json().await.expect("commit JSON");
    body["metadata-location"]
        .as_str()
        .expect("a location")
        .to_owned()
}
