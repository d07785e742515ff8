//! Trino (io.trino:trino-server-core with its Iceberg connector, from Maven Central, installed by
//! scripts/trino-env.sh) as a one-node cluster on a loopback port it picks itself, one per test
//! binary, with catalogs made per test (`catalog.management=dynamic`); queries go over Trino's
//! HTTP protocol.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct Trino {
    _child: Child,
    pub url: String,
    http: reqwest::Client,
}

fn home() -> PathBuf {
    PathBuf::from(std::env::var("ICECACHE_TRINO_HOME").unwrap_or_else(|_| {
        panic!(
            "ICECACHE_TRINO_HOME is not set: run the suite with ./scripts/test.sh, which \
             installs Trino (scripts/trino-env.sh)"
        )
    }))
}

fn java_home() -> String {
    std::env::var("ICECACHE_TRINO_JAVA_HOME")
        .unwrap_or_else(|_| "/usr/lib/jvm/temurin-25-jdk-amd64".to_owned())
}

impl Trino {
    /// The binary's Trino, started on first use (up to three minutes on a loaded machine). It
    /// stops when this process does: the shell that runs it waits for its stdin to close.
    pub async fn shared() -> &'static Trino {
        static SHARED: tokio::sync::OnceCell<Trino> = tokio::sync::OnceCell::const_new();
        SHARED.get_or_init(Trino::start).await
    }

    async fn start() -> Trino {
        let etc = std::env::temp_dir().join(crate::support::unique("trino-etc"));
        let data = etc.join("data");
        std::fs::create_dir_all(&data).expect("trino etc");
        let write = |name: &str, text: String| {
            std::fs::write(etc.join(name), text).expect("trino config");
        };
        write(
            "config.properties",
            "coordinator=true\nnode-scheduler.include-coordinator=true\n\
             http-server.http.port=0\ncatalog.management=dynamic\n\
             query.max-memory=1GB\nquery.max-memory-per-node=512MB\n"
                .to_owned(),
        );
        write(
            "node.properties",
            format!(
                "node.environment=icecache\nnode.id={}\nnode.data-dir={}\n\
                 node.bind-ip=127.0.0.1\nnode.internal-address=127.0.0.1\n",
                crate::support::unique("node"),
                data.display()
            ),
        );
        write(
            "jvm.config",
            "-server\n-Xmx2G\n-XX:+UseG1GC\n-XX:+ExitOnOutOfMemoryError\n\
             -Djdk.attach.allowAttachSelf=true\n"
                .to_owned(),
        );
        write("log.properties", "io.trino=INFO\n".to_owned());
        let launcher = home().join("bin/launcher");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("\"$@\" & server=$!; cat >/dev/null; kill $server; wait $server")
            .arg("sh")
            .arg(launcher)
            .arg("run")
            .arg(format!("--etc-dir={}", etc.display()))
            .arg(format!("--data-dir={}", data.display()))
            .env("JAVA_HOME", java_home())
            .env(
                "PATH",
                format!(
                    "{}/bin:{}",
                    java_home(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("Trino's launcher starts");
        // `launcher run` logs to stderr.
        let stdout = child.stderr.take().expect("stderr");
        // Its log is read to the end (a full pipe would stall it): the port first, then
        // SERVER STARTED, then nothing more is needed.
        let (started, port) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut started = Some(started);
            let mut port = None;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find("{127.0.0.1:") {
                    port = line[at + 11..]
                        .split('}')
                        .next()
                        .and_then(|p| p.parse::<u16>().ok());
                }
                if line.contains("SERVER STARTED") {
                    if let Some(started) = started.take() {
                        let _ = started.send(port);
                    }
                }
            }
        });
        let port = tokio::time::timeout(Duration::from_secs(180), port)
            .await
            .expect("Trino starts within three minutes")
            .expect("Trino's log")
            .expect("Trino said where it listens before SERVER STARTED");
        Trino {
            _child: child,
            url: format!("http://127.0.0.1:{port}"),
            // One Trino serves every test of the binary, each on its own runtime: a connection
            // kept from one test's runtime is dead in the next ("runtime dropped the dispatch
            // task"), so none is kept.
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("an HTTP client"),
        }
    }

    /// Runs one statement and returns its rows, each value as text (NULL as null); a failed
    /// statement panics with Trino's message.
    pub async fn query(&self, sql: &str) -> Vec<Vec<Value>> {
        let mut answer: Value = self
            .http
            .post(format!("{}/v1/statement", self.url))
            .header("X-Trino-User", "icecache")
            .body(sql.to_owned())
            .send()
            .await
            .expect("Trino answers")
            .json()
            .await
            .expect("Trino's JSON");
        let mut rows = Vec::new();
        loop {
            if let Some(error) = answer.get("error") {
                panic!("Trino refused {sql}: {}", error["message"]);
            }
            for row in answer["data"].as_array().into_iter().flatten() {
                let row = row.as_array().cloned().unwrap_or_default();
                rows.push(
                    row.into_iter()
                        .map(|v| match v {
                            Value::Null => Value::Null,
                            Value::String(s) => Value::String(s),
                            other => Value::String(other.to_string()),
                        })
                        .collect(),
                );
            }
            let Some(next) = answer["nextUri"].as_str().map(str::to_owned) else {
                return rows;
            };
            answer = self
                .http
                .get(next)
                .header("X-Trino-User", "icecache")
                .send()
                .await
                .expect("Trino answers")
                .json()
                .await
                .expect("Trino's JSON");
        }
    }

    /// An Iceberg catalog on the REST catalog at `uri` whose data is on the suite's S3; `auth`
    /// adds the OAuth2 client credentials SeaweedFS wants. Returns its name.
    pub async fn iceberg_catalog(&self, uri: &str, warehouse: Option<&str>, auth: bool) -> String {
        let name = crate::support::unique("c");
        let mut properties = vec![
            ("iceberg.catalog.type", "rest".to_owned()),
            ("iceberg.rest-catalog.uri", uri.to_owned()),
            ("fs.native-s3.enabled", "true".to_owned()),
            ("s3.endpoint", crate::jvm::s3_endpoint()),
            ("s3.region", "us-east-1".to_owned()),
            ("s3.path-style-access", "true".to_owned()),
            ("s3.aws-access-key", "admin".to_owned()),
            ("s3.aws-secret-key", "adminsecret".to_owned()),
        ];
        if let Some(warehouse) = warehouse {
            properties.push(("iceberg.rest-catalog.warehouse", warehouse.to_owned()));
        }
        if auth {
            properties.push(("iceberg.rest-catalog.security", "OAUTH2".to_owned()));
            properties.push((
                "iceberg.rest-catalog.oauth2.credential",
                "admin:adminsecret".to_owned(),
            ));
        }
        let with: Vec<String> = properties
            .iter()
            .map(|(k, v)| format!("\"{k}\" = '{v}'"))
            .collect();
        self.query(&format!(
            "CREATE CATALOG {name} USING iceberg WITH ({})",
            with.join(", ")
        ))
        .await;
        name
    }
}
