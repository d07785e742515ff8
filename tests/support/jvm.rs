//! The JVM side of the suite (tests/java, built by scripts/java-env.sh from pinned Maven Central
//! artifacts): the Iceberg Java client, driven one JSON command per line by one JVM per test
//! binary, and Iceberg's reference REST catalog server on a loopback port it picks itself.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The classpath of tests/java: its jar and the libraries Maven copied beside it.
pub fn classpath() -> String {
    let target = root().join("tests/java/target");
    let jar = target.join("icecache-java-tests-1.jar");
    assert!(
        jar.exists(),
        "{} is missing: run the suite with ./scripts/test.sh, which builds tests/java \
         (scripts/java-env.sh)",
        jar.display()
    );
    format!("{}:{}/lib/*", jar.display(), target.display())
}

/// The `java` the suite runs (Java 17 unless `ICECACHE_TEST_JAVA` names another).
pub fn java() -> String {
    std::env::var("ICECACHE_TEST_JAVA").unwrap_or_else(|_| "java".to_owned())
}

struct Pipes {
    _child: Child,
    commands: ChildStdin,
    answers: BufReader<ChildStdout>,
}

/// A process that answers one JSON line for each JSON command line (the Java client's agent,
/// the Spark session), shared by every test of a binary; commands run one at a time. It exits
/// when this process does (its stdin closes).
pub struct LineAgent(Mutex<Pipes>);

impl LineAgent {
    pub fn spawn(mut command: Command) -> LineAgent {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("ICECACHE_TEST_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?} starts: {e}"));
        let commands = child.stdin.take().expect("stdin");
        let answers = BufReader::new(child.stdout.take().expect("stdout"));
        LineAgent(Mutex::new(Pipes {
            _child: child,
            commands,
            answers,
        }))
    }

    /// Runs one command and returns its result; a command that failed panics with the
    /// agent's account of it (a Java or Python stack trace).
    pub async fn call(&'static self, command: Value) -> Value {
        let line = command.to_string();
        let answer = tokio::task::spawn_blocking(move || {
            let mut pipes = self.0.lock().unwrap_or_else(|e| e.into_inner());
            writeln!(pipes.commands, "{line}").expect("the agent reads commands");
            pipes.commands.flush().expect("flush");
            let mut answer = String::new();
            pipes
                .answers
                .read_line(&mut answer)
                .expect("the agent answers");
            answer
        })
        .await
        .expect("the agent call");
        let answer: Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("the agent answered {answer:?}: {e}"));
        assert_eq!(
            answer["ok"],
            true,
            "the agent failed {}:\n{}",
            command["op"],
            answer["error"].as_str().unwrap_or_default()
        );
        answer["result"].clone()
    }
}

/// The Iceberg Java client's JVM (dev.icecache.it.Agent).
pub struct Agent;

impl Agent {
    pub fn shared() -> &'static LineAgent {
        static AGENT: OnceLock<LineAgent> = OnceLock::new();
        AGENT.get_or_init(|| {
            let mut command = Command::new(java());
            command.args(["-Xmx512m", "-cp", &classpath(), "dev.icecache.it.Agent"]);
            LineAgent::spawn(command)
        })
    }
}

/// One Spark session (pyspark, local[2], the Iceberg Spark runtime) for a whole test binary;
/// each test adds the catalogs it needs under names of its own.
pub struct Spark;

impl Spark {
    pub async fn shared() -> &'static LineAgent {
        static SPARK: OnceLock<LineAgent> = OnceLock::new();
        static READY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        let spark = SPARK.get_or_init(|| {
            let jars = root().join("tests/java/target/spark");
            let jars = [
                "iceberg-spark-runtime-3.5_2.12-1.11.0.jar",
                "iceberg-aws-bundle-1.11.0.jar",
            ]
            .map(|jar| jars.join(jar).display().to_string())
            .join(",");
            let mut command = Command::new(crate::support::python());
            command
                .arg(root().join("tests/py/spark_agent.py"))
                .arg(jars);
            LineAgent::spawn(command)
        });
        // The session says it is ready before any command is read.
        READY
            .get_or_init(|| async {
                spark.call(json!({ "op": "ready" })).await;
            })
            .await;
        spark
    }
}

/// Iceberg's reference REST catalog server (RESTCatalogServer's adapter and servlet, a JDBC
/// catalog on SQLite), killed when dropped.
pub struct ReferenceCatalog {
    child: Child,
    pub url: String,
}

impl ReferenceCatalog {
    /// Starts it with these catalog properties and waits (up to a minute, a JVM on a loaded
    /// machine) for the port it got.
    pub async fn start(properties: &[(&str, &str)]) -> ReferenceCatalog {
        let mut command = Command::new(java());
        command.args([
            "-Xmx512m",
            "-cp",
            &classpath(),
            "org.apache.iceberg.rest.LoopbackCatalogServer",
        ]);
        command.args(properties.iter().map(|(k, v)| format!("{k}={v}")));
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("java starts");
        let stdout = child.stdout.take().expect("stdout");
        let first = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        });
        let line = tokio::time::timeout(Duration::from_secs(60), first)
            .await
            .expect("the reference catalog says where it listens within a minute")
            .expect("join")
            .expect("its stdout");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the reference catalog printed {line:?}"))
            .to_owned();
        ReferenceCatalog { child, url }
    }

    /// The binary's reference catalog, on the suite's SeaweedFS S3 (scripts/test.sh makes its
    /// bucket), vending the S3 keys in every table's `config` as a catalog that vends
    /// credentials does (`include-credentials`). Started on first use; it stops when this
    /// process does (its stdin closes).
    pub async fn shared() -> &'static ReferenceCatalog {
        static SHARED: tokio::sync::OnceCell<ReferenceCatalog> = tokio::sync::OnceCell::const_new();
        SHARED
            .get_or_init(|| async {
                let warehouse = format!(
                    "s3://{}/{}",
                    reference_bucket(),
                    crate::support::unique("wh")
                );
                let s3 = s3_endpoint();
                ReferenceCatalog::start(&[
                    ("warehouse", &warehouse),
                    ("io-impl", "org.apache.iceberg.aws.s3.S3FileIO"),
                    ("s3.endpoint", &s3),
                    ("s3.path-style-access", "true"),
                    ("s3.access-key-id", "admin"),
                    ("s3.secret-access-key", "adminsecret"),
                    ("client.region", "us-east-1"),
                    ("include-credentials", "true"),
                ])
                .await
            })
            .await
    }
}

impl Drop for ReferenceCatalog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates a namespace and a table in it on a catalog that needs no prefix nor token (the
/// reference catalog); returns `namespace.table`.
pub async fn reference_table(url: &str) -> String {
    let namespace = crate::support::unique("ref");
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{url}/v1/namespaces"))
        .json(&json!({ "namespace": [namespace] }))
        .send()
        .await
        .expect("create namespace");
    assert_eq!(created.status(), 200, "create namespace");
    let schema = json!({ "type": "struct", "schema-id": 0,
        "fields": [{ "id": 1, "name": "id", "type": "long", "required": false }] });
    let created = http
        .post(format!("{url}/v1/namespaces/{namespace}/tables"))
        .json(&json!({ "name": "t", "schema": schema }))
        .send()
        .await
        .expect("create table");
    assert_eq!(created.status(), 200, "create table");
    format!("{namespace}.t")
}

/// The suite's SeaweedFS S3 endpoint.
pub fn s3_endpoint() -> String {
    std::env::var("ICECACHE_TEST_S3").unwrap_or_else(|_| "http://127.0.0.1:8333".to_owned())
}

/// A plain S3 bucket on the suite's SeaweedFS for the reference catalog's warehouse.
pub fn reference_bucket() -> String {
    std::env::var("ICECACHE_TEST_S3_BUCKET").unwrap_or_else(|_| "icecache-reference".to_owned())
}

/// What a Java client is given to reach a catalog at `uri` whose data is on the suite's S3.
pub fn client(uri: &str) -> Value {
    json!({
        "uri": uri,
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "s3.endpoint": s3_endpoint(),
        "s3.path-style-access": "true",
        "s3.access-key-id": "admin",
        "s3.secret-access-key": "adminsecret",
        "client.region": "us-east-1",
    })
}

/// A Java client for the suite's SeaweedFS catalog (its warehouse, OAuth with the admin
/// account, views: SeaweedFS advertises no endpoints).
pub fn seaweedfs_client(uri: &str) -> Value {
    let mut properties = client(uri);
    let extra = json!({
        "warehouse": crate::support::PREFIX,
        "rest.auth.type": "oauth2",
        "credential": "admin:adminsecret",
        "oauth2-server-uri": format!("{uri}/v1/oauth/tokens"),
        "view-endpoints-supported": "true",
    });
    for (key, value) in extra.as_object().into_iter().flatten() {
        properties[key] = value.clone();
    }
    properties
}
