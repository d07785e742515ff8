//! A real redis-server (Debian's, installed by scripts/test.sh) on a port of the suite's range, and a
//! tier of icecache replicas sharing it and one cluster key.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{ports, unique, until_serving, Icecache};

fn connect(url: &str) -> redis::RedisResult<redis::Connection> {
    redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(1))
}

/// A redis-server process without persistence; killed when dropped.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
}

impl Redis {
    pub async fn start() -> Redis {
        let mut redis = Redis::not_started();
        redis.spawn().await;
        redis
    }

    /// A port where no Redis runs yet (`restart` starts it there).
    pub fn not_started() -> Redis {
        Redis {
            child: None,
            port: ports::reserved(),
        }
    }

    async fn spawn(&mut self) {
        if !self.try_spawn().await {
            panic!("redis-server did not start on port {}", self.port);
        }
    }

    /// Starts redis-server on this port; false when it exits or does not answer within 10 s.
    async fn try_spawn(&mut self) -> bool {
        let binary =
            std::env::var("ICECACHE_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{binary} starts (scripts/test.sh installs Debian's redis-server): {e}")
            });
        self.child = Some(child);
        let url = self.url();
        until_serving(&mut self.child, || connect(&url).is_ok()).await
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        connect(&self.url())
    }

    /// Kills the server at once (SIGKILL): Redis is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Every key with its value (strings as bytes, other types as their type name).
    pub fn dump(&self) -> Vec<(String, Vec<u8>)> {
        let mut connection = self.connection().expect("redis answers");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut connection)
            .expect("KEYS");
        keys.into_iter()
            .map(|key| {
                let value = redis::cmd("GET")
                    .arg(&key)
                    .query::<Option<Vec<u8>>>(&mut connection)
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| b"(not a string)".to_vec());
                (key, value)
            })
            .collect()
    }

    /// Every key and value as text, with any gzip inside a value unpacked: what a search for a
    /// secret must read.
    pub fn text(&self) -> String {
        let mut text = String::new();
        for (key, value) in self.dump() {
            text.push_str(&key);
            text.push_str(&String::from_utf8_lossy(&value));
            for start in 0..value.len().saturating_sub(2) {
                if value[start..].starts_with(&[0x1f, 0x8b, 0x08]) {
                    let mut unpacked = Vec::new();
                    let mut decoder = flate2::read::GzDecoder::new(&value[start..]);
                    if std::io::Read::read_to_end(&mut decoder, &mut unpacked).is_ok() {
                        text.push_str(&String::from_utf8_lossy(&unpacked));
                    }
                }
            }
        }
        text
    }
}

/// What the tier's fault tests (tests/cluster) do to Redis; the core suite only starts one.
#[allow(dead_code)]
impl Redis {
    /// A new, empty server on the same port (a restart without persistence, or a failover to
    /// an empty node).
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }

    pub fn flushall(&self) {
        let mut connection = self.connection().expect("redis answers");
        redis::cmd("FLUSHALL")
            .query::<()>(&mut connection)
            .expect("FLUSHALL");
    }

    pub fn set(&self, key: &str, value: &[u8]) {
        let mut connection = self.connection().expect("redis answers");
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query::<()>(&mut connection)
            .expect("SET");
    }

    /// Runs a command on the server (as the default user) and returns its answer as text.
    pub fn command(&self, args: &[&str]) -> String {
        let mut connection = self.connection().expect("redis answers");
        let mut command = redis::cmd(args[0]);
        for arg in &args[1..] {
            command.arg(*arg);
        }
        match command.query::<redis::Value>(&mut connection) {
            Ok(value) => format!("{value:?}"),
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    /// The names of the keys that start with `prefix`.
    pub fn keys_starting(&self, prefix: &str) -> Vec<String> {
        self.dump()
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| key.starts_with(prefix))
            .collect()
    }

    /// A URL that logs in as `user` with `password`.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!("redis://{user}:{password}@127.0.0.1:{}", self.port)
    }

    /// Drops every subscriber's connection (as a network blip or a proxy restart would).
    pub fn kill_subscribers(&self) {
        let mut connection = self.connection().expect("redis answers");
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query::<i64>(&mut connection)
            .expect("CLIENT KILL");
    }

    /// How many times Redis ran `command` so far (INFO commandstats).
    pub fn calls(&self, command: &str) -> u64 {
        let mut connection = self.connection().expect("redis answers");
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut connection)
            .expect("INFO");
        let prefix = format!("cmdstat_{}:calls=", command.to_ascii_lowercase());
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The file of random bytes the replicas share.
pub struct KeyFile(pub PathBuf);

impl KeyFile {
    pub fn new() -> KeyFile {
        let path = std::env::temp_dir().join(unique("icecache-cluster-key"));
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8)
                .wrapping_mul(37)
                .wrapping_add(std::process::id() as u8);
        }
        std::fs::write(&path, bytes).expect("key file written");
        KeyFile(path)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temp path")
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `n` replicas in front of `upstream`, sharing `redis` and one key.
pub struct Tier {
    pub replicas: Vec<Icecache>,
    /// Kept for as long as the tier runs; the tier's own tests read it.
    #[allow(dead_code)]
    pub key: KeyFile,
}

impl Tier {
    pub async fn start(n: usize, upstream: &str, redis: &Redis, extra: &[&str]) -> Tier {
        Tier::start_at(&vec![redis.url(); n], upstream, extra).await
    }

    /// One replica per Redis URL (each may log in as its own user).
    pub async fn start_at(urls: &[String], upstream: &str, extra: &[&str]) -> Tier {
        let key = KeyFile::new();
        let mut replicas = Vec::new();
        for url in urls {
            let mut flags = vec![
                "--redis-url",
                url,
                "--cluster-key-file",
                key.path(),
                "--workers",
                "1",
            ];
            flags.extend_from_slice(extra);
            replicas.push(Icecache::start(upstream, &flags).await);
        }
        let tier = Tier { replicas, key };
        tier.wait_live().await;
        tier
    }

    /// Waits until every replica says it is not degraded and hears the others.
    pub async fn wait_live(&self) {
        for replica in &self.replicas {
            super::eventually("a replica live on Redis", || async {
                let metrics = replica.metrics().await;
                super::metric(&metrics, "icecache_cluster_degraded") == 0.0
                    && super::metric(&metrics, "icecache_cluster_subscribed") == 1.0
            })
            .await;
        }
    }

    pub fn url(&self, replica: usize) -> &str {
        &self.replicas[replica % self.replicas.len()].url
    }
}

// What the tier tests ask of a replica.

pub const TABLE: &str = "/v1/namespaces/db/tables/t";

pub async fn load(url: &str, caller: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{url}{TABLE}"))
        .bearer_auth(caller)
        .send()
        .await
        .expect("the replica answers")
}
