//! A connection that sends a load's head again is answered from what that head derived the
//! first time: the caller, the key, the policy. Whatever else changes between two requests on
//! one connection (the caller, the table, the settings, the table itself) is seen at once.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::standin::{vended_keys, version_of, Shape, StandIn};
use crate::support::{empty_commit, hangup, ConfigFile, Icecache};

const PATH: &str = "/v1/namespaces/db/tables/t";
/// Every entry stays fresh for the whole test, however slow the machine: a repeat is a `HIT`.
const FRESH: [&str; 2] = ["--fresh-for", "1h"];

/// One kept-alive HTTP/1.1 connection, asked one request at a time.
struct Connection {
    stream: TcpStream,
    host: String,
    /// Bytes read past the last answer.
    read: Vec<u8>,
}

/// An answer's head and body.
struct Answer {
    head: String,
    body: String,
}

impl Answer {
    fn field(&self, name: &str) -> Option<&str> {
        self.head.split("\r\n").skip(1).find_map(|line| {
            let (n, v) = line.split_once(": ")?;
            n.eq_ignore_ascii_case(name).then_some(v)
        })
    }

    fn x_cache(&self) -> &str {
        self.field("x-cache").unwrap_or("")
    }
}

impl Connection {
    async fn open(icecache: &Icecache) -> Connection {
        let host = icecache.url.trim_start_matches("http://").to_owned();
        let stream = TcpStream::connect(&host).await.unwrap();
        Connection {
            stream,
            host,
            read: Vec::new(),
        }
    }

    async fn get(&mut self, path: &str, fields: &[(&str, &str)]) -> Answer {
        let fields: String = fields
            .iter()
            .map(|(n, v)| format!("{n}: {v}\r\n"))
            .collect();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n{fields}\r\n", self.host);
        self.stream.write_all(request.as_bytes()).await.unwrap();
        let end = loop {
            if let Some(end) = self.read.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            self.fill().await;
        };
        let head = String::from_utf8_lossy(&self.read[..end]).into_owned();
        self.read.drain(..end + 4);
        let mut answer = Answer {
            head,
            body: String::new(),
        };
        let length: usize = match answer.head.starts_with("HTTP/1.1 304") {
            true => 0,
            false => answer.field("content-length").unwrap().parse().unwrap(),
        };
        while self.read.len() < length {
            self.fill().await;
        }
        answer.body = String::from_utf8_lossy(&self.read[..length]).into_owned();
        self.read.drain(..length);
        answer
    }

    async fn fill(&mut self) {
        let mut buffer = [0u8; 16 * 1024];
        let n = self.stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "the connection closed");
        self.read.extend_from_slice(&buffer[..n]);
    }
}

fn as_caller(caller: &str) -> [(&'static str, String); 2] {
    [
        ("Authorization", format!("Bearer {caller}")),
        (
            "X-Iceberg-Access-Delegation",
            "vended-credentials".to_owned(),
        ),
    ]
}

fn fields<'a>(owned: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    owned.iter().map(|(n, v)| (*n, v.as_str())).collect()
}

async fn catalog_of(tables: &[&str]) -> StandIn {
    let catalog = StandIn::start(Shape::default()).await;
    for table in tables {
        catalog.create(table);
    }
    catalog
}

#[tokio::test]
async fn callers_taking_turns_on_one_connection_each_get_the_credentials_vended_for_them() {
    let catalog = catalog_of(&["t"]).await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--credentials", "passthrough", FRESH[0], FRESH[1]],
    )
    .await;
    let mut connection = Connection::open(&icecache).await;
    let turns = [
        "alice", "alice", "bob", "alice", "bob", "bob", "carol", "alice",
    ];
    let mut phases = Vec::new();
    for caller in turns {
        let answer = connection.get(PATH, &fields(&as_caller(caller))).await;
        let keys = vended_keys(&answer.body);
        assert!(!keys.is_empty(), "{}", answer.body);
        assert!(
            keys.iter().all(|key| key.contains(&format!("-{caller}-"))),
            "{caller} got {keys:?}"
        );
        phases.push(answer.x_cache().to_owned());
    }
    let expected = ["MISS", "HIT", "MISS", "HIT", "HIT", "HIT", "MISS", "HIT"];
    assert_eq!(phases, expected);
}

#[tokio::test]
async fn callers_taking_turns_on_one_http2_connection_each_get_their_own() {
    let catalog = catalog_of(&["t"]).await;
    let icecache = Icecache::start(
        &catalog.url,
        &["--credentials", "passthrough", FRESH[0], FRESH[1]],
    )
    .await;
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let url = format!("{}{PATH}", icecache.url);
    for _ in 0..3 {
        // Many streams at once on the client's one connection, the callers interleaved.
        let asks = (0..24).map(|n| {
            let caller = ["alice", "bob", "carol"][n % 3];
            let request = client
                .get(&url)
                .bearer_auth(caller)
                .header("x-iceberg-access-delegation", "vended-credentials");
            async move { (caller, request.send().await.unwrap().text().await.unwrap()) }
        });
        for (caller, body) in futures::future::join_all(asks).await {
            let keys = vended_keys(&body);
            assert!(!keys.is_empty(), "{body}");
            assert!(
                keys.iter().all(|key| key.contains(&format!("-{caller}-"))),
                "{caller} got {keys:?}"
            );
        }
    }
}

#[tokio::test]
async fn tables_taking_turns_on_one_connection_each_answer_for_themselves() {
    let catalog = catalog_of(&["t", "u"]).await;
    catalog.commit_directly("u");
    let icecache = Icecache::start(&catalog.url, &FRESH).await;
    let mut connection = Connection::open(&icecache).await;
    let token = [("Authorization", "Bearer alice")];
    for _ in 0..3 {
        for (path, version) in [
            (PATH, 1),
            ("/v1/namespaces/db/tables/u", 2),
            (PATH, 1),
            ("/v1/namespaces/db/tables/t?snapshots=refs", 1),
        ] {
            let answer = connection.get(path, &token).await;
            let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            assert_eq!(version_of(&body), Some(version), "{path}");
        }
    }
    // Three keys (`t` in two forms, and `u`), each filled once.
    assert_eq!(catalog.loads("t") + catalog.loads("u"), 3);
}

#[tokio::test]
async fn a_commit_between_two_equal_heads_is_seen_by_the_second() {
    let catalog = catalog_of(&["t"]).await;
    let icecache = Icecache::start(&catalog.url, &FRESH).await;
    let mut connection = Connection::open(&icecache).await;
    let token = [("Authorization", "Bearer alice")];
    for expected in 1..=3 {
        for phase in ["MISS", "HIT"] {
            let answer = connection.get(PATH, &token).await;
            let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            assert_eq!(version_of(&body), Some(expected));
            assert_eq!(answer.x_cache(), phase);
        }
        let committed = empty_commit(&format!("{}{PATH}", icecache.url), "alice").await;
        assert!(committed.status().is_success());
    }
}

#[tokio::test]
async fn a_reload_applies_to_the_next_equal_head_on_a_kept_connection() {
    let catalog = StandIn::start(Shape {
        extra_config: vec![("custom.thing", "kept")],
        ..Shape::default()
    })
    .await;
    catalog.create("t");
    let config = ConfigFile::new("credentials = \"strip\"\n[cache]\nfresh_for = \"1h\"\n");
    let icecache = Icecache::start(&catalog.url, &["--config", config.path()]).await;
    let mut connection = Connection::open(&icecache).await;
    let ask = as_caller("alice");
    for _ in 0..2 {
        let answer = connection.get(PATH, &fields(&ask)).await;
        assert!(answer.body.contains("custom.thing"), "{}", answer.body);
        assert!(answer.field("x-cache").is_some());
    }
    config.rewrite(
        "credentials = \"strip\"\nstrip_keys = [\"custom.*\", \"x-cache\"]\n[cache]\nfresh_for = \"1h\"\n",
    );
    hangup(&icecache, "applied").await;
    for _ in 0..2 {
        let answer = connection.get(PATH, &fields(&ask)).await;
        assert!(!answer.body.contains("custom.thing"), "{}", answer.body);
        assert_eq!(answer.field("x-cache"), None, "{}", answer.head);
        assert!(answer.field("cache-status").is_some(), "{}", answer.head);
    }
}

/// Asks `path` on `connection` (with `token`) until `done` holds of an answer, a bounded number
/// of times; returns how many answers that took.
async fn ask_until(
    connection: &mut Connection,
    path: &str,
    token: &[(&str, &str)],
    done: impl Fn(&Answer) -> bool,
) -> usize {
    for asked in 1..=600 {
        if done(&connection.get(path, token).await) {
            return asked;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("never happened in 600 answers");
}

fn version(answer: &Answer) -> Option<u64> {
    version_of(&serde_json::from_str(&answer.body).ok()?)
}

#[tokio::test]
async fn a_table_changed_at_the_catalog_is_what_equal_heads_get_once_it_was_fetched_again() {
    let catalog = catalog_of(&["t"]).await;
    // Short-lived entries: the change is fetched once the entry holding version 1 goes stale.
    let icecache = Icecache::start(&catalog.url, &["--fresh-for", "300ms"]).await;
    let mut connection = Connection::open(&icecache).await;
    let token = [("Authorization", "Bearer alice")];
    for _ in 0..3 {
        assert_eq!(version(&connection.get(PATH, &token).await), Some(1));
    }
    catalog.commit_directly("t");
    ask_until(&mut connection, PATH, &token, |a| version(a) == Some(2)).await;
    for _ in 0..40 {
        assert_eq!(version(&connection.get(PATH, &token).await), Some(2));
    }
}

#[tokio::test]
async fn a_table_dropped_at_the_catalog_is_never_served_again_once_its_entry_was_removed() {
    let catalog = catalog_of(&["t"]).await;
    // A stale entry would be served while it is revalidated: until the catalog's 404 removes it.
    let icecache = Icecache::start(
        &catalog.url,
        &["--fresh-for", "300ms", "--stale-while-revalidate", "1h"],
    )
    .await;
    let mut connection = Connection::open(&icecache).await;
    let token = [("Authorization", "Bearer alice")];
    for _ in 0..3 {
        assert_eq!(version(&connection.get(PATH, &token).await), Some(1));
    }
    let dropped = reqwest::Client::new()
        .delete(format!("{}{PATH}", catalog.url))
        .send()
        .await
        .unwrap();
    assert!(dropped.status().is_success());
    ask_until(&mut connection, PATH, &token, |a| {
        a.head.starts_with("HTTP/1.1 404")
    })
    .await;
    for _ in 0..40 {
        let answer = connection.get(PATH, &token).await;
        assert!(answer.head.starts_with("HTTP/1.1 404"), "{}", answer.head);
    }
}
