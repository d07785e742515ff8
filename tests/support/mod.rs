//! Test harness: the real catalog that `scripts/test.sh` started, a real icecache process, a
//! counting relay between them, and pyiceberg.

pub mod cluster;
pub mod events;
pub mod fake;
pub mod kafka;
pub mod ports;
pub mod relay;
pub mod standin;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

/// One side of an HTTP/2 (prior knowledge) connection to `address`, and the task that drives
/// it (it ends when the connection closes).
pub async fn h2_connection(
    address: &str,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    (sender, tokio::spawn(connection))
}

/// A connection to `address` whose receive buffer is fixed at `bytes` (the kernel doubles it),
/// so that most of a large answer waits on icecache's side.
#[allow(dead_code)] // the core suite (tests/it) uses it
pub async fn small_buffer_connection(address: &str, bytes: u32) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(bytes).unwrap();
    socket.connect(address.parse().unwrap()).await.unwrap()
}

/// An HTTP/2 client's sending half and its connection's task.
#[allow(dead_code)] // the core suite (tests/it) uses it
pub type H2Client = (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
);

/// An HTTP/2 client on `io` that grants each stream `window` bytes and the connection
/// `connection_window`, more only as it reads (none while it reads nothing), and answers pings
/// (its connection task runs).
#[allow(dead_code)] // the core suite (tests/it) uses it
pub async fn h2_handshake<I>(io: I, window: u32, connection_window: u32) -> H2Client
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(window)
            .initial_connection_window_size(connection_window)
            .handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .unwrap();
    (sender, tokio::spawn(connection))
}

/// The head of icecache's answer to a GET of `path` sent as raw HTTP/1.1 bytes (a client
/// library would normalise the path, and reads header names in any case), with `headers`
/// (lines ending in CRLF) besides `Host`.
pub async fn raw_get_head(icecache: &Icecache, path: &str, headers: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = icecache.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    text.split("\r\n\r\n").next().unwrap().to_owned()
}

/// The `x-cache` header of an answer (how icecache produced it).
pub fn x_cache(response: &reqwest::Response) -> String {
    response.headers()["x-cache"].to_str().unwrap().to_owned()
}

/// An empty commit (no requirements, no updates) sent as `caller` to a table's URL.
pub async fn empty_commit(table_url: &str, caller: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(table_url)
        .bearer_auth(caller)
        .json(&json!({ "requirements": [], "updates": [] }))
        .send()
        .await
        .expect("the commit is sent")
}

/// An empty commit as `alice` with an `Idempotency-Key`.
pub async fn commit_with_key(
    client: &reqwest::Client,
    table_url: &str,
    key: &str,
) -> reqwest::Response {
    client
        .post(table_url)
        .bearer_auth("alice")
        .header("idempotency-key", key)
        .json(&json!({ "requirements": [], "updates": [] }))
        .send()
        .await
        .expect("the commit is sent")
}

/// The `Idempotent-Replayed` an answer carries, if any.
pub fn replayed(response: &reqwest::Response) -> Option<&str> {
    response
        .headers()
        .get("idempotent-replayed")
        .and_then(|v| v.to_str().ok())
}

/// The SeaweedFS Iceberg REST catalog started by `scripts/test.sh`.
pub fn catalog() -> String {
    std::env::var("ICECACHE_TEST_CATALOG").unwrap_or_else(|_| {
        panic!(
            "ICECACHE_TEST_CATALOG is not set: run the suite with ./scripts/test.sh, which \
             installs and starts the real catalog these tests need"
        )
    })
}

pub const PREFIX: &str = "warehouse";

/// A name no other test (or earlier run against the same catalog) uses.
pub fn unique(stem: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{stem}_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos % 100_000
    )
}

/// A running icecache process, killed when dropped.
pub struct Icecache {
    child: Child,
    pub url: String,
    pub admin: String,
    /// Where its stderr (the logs) goes.
    log: PathBuf,
}

/// The icecache binary under test: this build's, or `ICECACHE_TEST_BIN` (to run the suite
/// against another build, e.g. to see a new test fail on the code before a fix).
pub fn binary() -> PathBuf {
    std::env::var_os("ICECACHE_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_icecache")))
}

impl Icecache {
    /// Starts icecache in front of `upstream` with extra flags, and waits until it serves. What
    /// it logs is kept for `logs`.
    pub async fn start(upstream: &str, extra: &[&str]) -> Icecache {
        Icecache::start_with_env(upstream, extra, &[]).await
    }

    /// Starts icecache with extra environment variables too.
    pub async fn start_with_env(upstream: &str, extra: &[&str], env: &[(&str, &str)]) -> Icecache {
        Icecache::launch(upstream, extra, env, None).await
    }

    /// Starts icecache with its admin listener on `admin_port` (from `ports::reserved`, for a
    /// catalog that must be told where to send its events before icecache starts).
    pub async fn start_with_admin(upstream: &str, admin_port: u16, extra: &[&str]) -> Icecache {
        Icecache::launch(upstream, extra, &[], Some(admin_port)).await
    }

    /// What icecache has logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Spawns icecache on ports it picks itself (port 0; its first log line says which) and
    /// waits until its admin listener is healthy; a failure to start panics with the end of its
    /// log.
    async fn launch(
        upstream: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        admin_port: Option<u16>,
    ) -> Icecache {
        let admin =
            admin_port.map_or_else(|| "127.0.0.1:0".to_owned(), |p| format!("127.0.0.1:{p}"));
        let log = std::env::temp_dir().join(format!("{}.log", unique("icecache")));
        let child = Command::new(binary())
            .args(["--upstream", upstream, "--listen", "127.0.0.1:0"])
            .args(["--admin-listen", &admin])
            .args(extra)
            .envs(env.iter().copied())
            .env_remove("ICECACHE_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).expect("log file")))
            .spawn()
            .expect("icecache starts");
        let mut icecache = Icecache {
            child,
            url: String::new(),
            admin: String::new(),
            log,
        };
        if let Err(why) = icecache.until_healthy().await {
            let log = icecache.logs();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "icecache did not become healthy ({why}); its log ends:\n{}",
                tail.join("\n")
            );
        }
        icecache
    }

    /// Waits up to `PATIENCE` for the addresses icecache bound and then for `/healthz` to
    /// answer 2xx.
    async fn until_healthy(&mut self) -> Result<(), String> {
        let client = reqwest::Client::new();
        for _ in 0..PATIENCE.as_millis() / 25 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("it exited: {status}"));
            }
            if self.admin.is_empty() {
                if let Some((listen, admin)) = bound_addresses(&self.logs()) {
                    self.url = format!("http://{listen}");
                    self.admin = format!("http://{admin}");
                }
            }
            if !self.admin.is_empty() {
                let healthz = client.get(format!("{}/healthz", self.admin)).send().await;
                if healthz.is_ok_and(|r| r.status().is_success()) {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(format!("no healthy answer within {PATIENCE:?}"))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The catalog-facing base URL with the warehouse prefix.
    #[allow(dead_code)] // the clients' tests (tests/clients) use it
    pub fn api(&self) -> String {
        format!("{}/v1/{PREFIX}", self.url)
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.admin))
            .await
            .expect("metrics answer")
            .text()
            .await
            .expect("metrics text")
    }

    /// Sends SIGTERM and waits for the process to exit; returns its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = std::time::Instant::now();
        while start.elapsed() < PATIENCE {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("icecache did not exit after SIGTERM");
    }

    /// Kills the process with SIGKILL (no cleanup, as a crash or an OOM kill would).
    #[allow(dead_code)] // the tier's tests (tests/cluster) use it
    pub fn kill_now(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Icecache {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var_os("ICECACHE_TEST_LOGS").is_some() {
            eprintln!("--- icecache {} logged:\n{}", self.url, self.logs());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The proxy and admin addresses from icecache's `icecache started` line (text or JSON logs).
fn bound_addresses(log: &str) -> Option<(String, String)> {
    let line = log.lines().find(|l| l.contains("icecache started"))?;
    let field = |name: &str| -> Option<String> {
        for pattern in [format!(" {name}="), format!("\"{name}\":\"")] {
            if let Some(at) = line.find(&pattern) {
                let rest = &line[at + pattern.len()..];
                let end = rest.find([' ', '"']).unwrap_or(rest.len());
                return Some(rest[..end].to_owned());
            }
        }
        None
    };
    Some((field("listen")?, field("admin")?))
}

/// Sends SIGHUP to icecache and waits until it counts a reload with `result`
/// (`applied` or `rejected`).
pub async fn hangup(icecache: &Icecache, result: &str) {
    let series = format!("icecache_config_reloads_total{{result=\"{result}\"}}");
    let before = metric(&icecache.metrics().await, &series);
    let status = Command::new("kill")
        .args(["-HUP", &icecache.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let what = format!("a {result} reload counted after SIGHUP");
    eventually(&what, || async {
        metric(&icecache.metrics().await, &series) > before
    })
    .await;
}

/// Waits (up to `PATIENCE`) until `ready` says a server just spawned serves: true once it does,
/// false at once if it exits or never serves (then it is killed). `child` is emptied unless it
/// serves.
pub async fn until_serving(child: &mut Option<Child>, ready: impl Fn() -> bool) -> bool {
    for _ in 0..PATIENCE.as_millis() / 20 {
        if ready() {
            return true;
        }
        let exited = child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some());
        if exited {
            *child = None;
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Some(mut stuck) = child.take() {
        let _ = stuck.kill();
        let _ = stuck.wait();
    }
    false
}

/// How long a test waits for something that must happen before it gives up. A guard against a
/// hang, never a measure of speed: what a test checks is that the thing happens (latency is the
/// benchmarks' to measure), so it is long enough for a debug build on a machine under load.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `done` every 20 ms until it holds; panics with `what` if it has not after `PATIENCE`.
/// Returns how long it took (for a test to print, never to assert).
pub async fn eventually<F, Fut>(what: &str, mut done: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    loop {
        if done().await {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{what} did not happen within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A config file in the temporary directory, removed when dropped.
pub struct ConfigFile(pub PathBuf);

impl ConfigFile {
    pub fn new(text: &str) -> ConfigFile {
        let path = std::env::temp_dir().join(format!("{}.toml", unique("icecache-config")));
        std::fs::write(&path, text).expect("config file written");
        ConfigFile(path)
    }

    pub fn rewrite(&self, text: &str) {
        std::fs::write(&self.0, text).expect("config file rewritten");
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The resident set size of a process, in bytes (from /proc).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// An OAuth token from the catalog (SeaweedFS's admin credentials).
pub async fn token(base: &str) -> String {
    try_token(base).await.expect("the catalog grants a token")
}

/// An OAuth token, or None while the catalog does not grant one (not up yet).
pub async fn try_token(base: &str) -> Option<String> {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/oauth/tokens"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "admin"),
            ("client_secret", "adminsecret"),
        ])
        .send()
        .await
        .ok()?;
    let answer: Value = response.json().await.ok()?;
    answer["access_token"].as_str().map(str::to_owned)
}

/// A client that sends the catalog's bearer token.
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Api {
    /// `base` is `http://host:port/v1/warehouse`.
    pub async fn new(server: &str) -> Api {
        Api {
            http: reqwest::Client::new(),
            base: format!("{server}/v1/{PREFIX}"),
            token: token(&catalog()).await,
        }
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// Sends `method` to an absolute URL with the bearer token.
    pub async fn send(&self, method: reqwest::Method, url: &str) -> reqwest::Response {
        self.http
            .request(method, url)
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("request sent")
    }

    /// GETs a path under the base and parses the JSON answer.
    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path)
            .send()
            .await
            .expect("request sent")
            .json()
            .await
            .expect("a JSON answer")
    }

    pub fn post(&self, path: &str, body: Value) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
    }

    pub async fn create_namespace(&self, namespace: &str) {
        let r = self
            .post("/namespaces", json!({ "namespace": [namespace] }))
            .send()
            .await
            .expect("create namespace");
        assert_eq!(r.status(), 200, "create namespace {namespace}");
    }

    pub async fn create_table(&self, namespace: &str, table: &str) -> Value {
        let schema = json!({
            "type": "struct", "schema-id": 0,
            "fields": [{ "id": 1, "name": "id", "type": "long", "required": false }]
        });
        let r = self
            .post(
                &format!("/namespaces/{namespace}/tables"),
                json!({ "name": table, "schema": schema }),
            )
            .send()
            .await
            .expect("create table");
        assert_eq!(r.status(), 200, "create table {namespace}.{table}");
        r.json().await.expect("create table JSON")
    }

    /// A namespace with one table in it, both named uniquely.
    pub async fn fresh_table(&self, stem: &str) -> (String, String) {
        let namespace = unique(stem);
        self.create_namespace(&namespace).await;
        self.create_table(&namespace, "t").await;
        (namespace, "t".to_owned())
    }

    pub async fn set_property(&self, namespace: &str, table: &str, key: &str, value: &str) {
        let r = self
            .post(
                &format!("/namespaces/{namespace}/tables/{table}"),
                json!({
                    "requirements": [],
                    "updates": [{ "action": "set-properties", "updates": { key: value } }]
                }),
            )
            .send()
            .await
            .expect("update table");
        assert_eq!(r.status(), 200, "update table {namespace}.{table}");
    }
}

/// A CreateViewRequest for a one-column SQL view with the property `k`.
pub fn view_body(name: &str, k: &str) -> Value {
    json!({
        "name": name,
        "schema": { "type": "struct", "schema-id": 0,
                    "fields": [{ "id": 1, "name": "x", "type": "long", "required": false }] },
        "view-version": { "version-id": 1, "timestamp-ms": 1_700_000_000_000u64, "schema-id": 0,
                          "summary": {}, "default-namespace": [],
                          "representations": [{ "type": "sql", "sql": "select 1 as x", "dialect": "spark" }] },
        "properties": { "k": k }
    })
}

/// The virtual environment's Python, with pyiceberg, installed by `scripts/test-env.sh`.
pub fn python() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".test-env/venv/bin/python")
}

/// Runs the pyiceberg client script against `uri` and returns the JSON it printed.
pub fn pyiceberg(uri: &str, args: &[&str]) -> Value {
    pyiceberg_with(uri, args, &[])
}

/// `pyiceberg` with environment variables for the script (`ICECACHE_PY_CATALOG=plain`,
/// `ICECACHE_PY_OWN_KEYS=0`).
pub fn pyiceberg_with(uri: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/iceberg_client.py");
    let output = Command::new(python())
        .arg(script)
        .arg(uri)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("pyiceberg runs (install it with scripts/test-env.sh)");
    assert!(
        output.status.success(),
        "pyiceberg {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("pyiceberg printed JSON")
}

/// GETs an absolute URL without credentials and parses the JSON answer.
pub async fn get_json(url: &str) -> Value {
    reqwest::get(url)
        .await
        .expect("request sent")
        .json()
        .await
        .expect("a JSON answer")
}

/// `pyiceberg` on a blocking thread, for async tests.
pub async fn pyiceberg_async(uri: &str, args: &[&str]) -> Value {
    let uri = uri.to_owned();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        pyiceberg(&uri, &args)
    })
    .await
    .expect("pyiceberg thread")
}

/// The value of one metric sample line (`name{labels} value`), or 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}
