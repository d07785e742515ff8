//! A stand-in catalog for what no catalog that runs here does: it vends S3 keys made for each
//! caller (`AK-<caller>-<n>`, expiring after a lifetime the test picks), can answer in the shapes
//! a real catalog might (`no-store`, a non-JSON content type, `"storage-credentials": null`, its
//! own ETag and 304s, a `Vary`), and keeps a version per table that every write through it
//! bumps, so a test can tell an old table state from a new one. It is a plain in-memory table
//! store: loads answer the current version, commits change it, drops remove it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// How the stand-in answers loadTable; every knob can change while it runs.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Vend keys even when the caller did not send `X-Iceberg-Access-Delegation`.
    pub vend_always: bool,
    pub lifetime: Duration,
    pub no_store: bool,
    pub content_type: &'static str,
    /// `"storage-credentials": null` instead of a list.
    pub null_storage_credentials: bool,
    /// Send an ETag (the version) and answer a matching `If-None-Match` with 304.
    pub etag: bool,
    /// With `etag`: the tag is weak (`W/"v<version>.<made ms>"`, as Polaris and Lakekeeper
    /// send) and `If-None-Match` is compared weakly (RFC 9110 §8.8.3.2).
    pub weak_etag: bool,
    /// With `etag`: a 304 only while the tag is younger than this, a 200 with fresh
    /// credentials after (Lakekeeper declines once vended credentials are half spent).
    pub no_304_after: Option<Duration>,
    pub vary: Option<&'static str>,
    /// Answer every loadTable with this status (and an Iceberg error body).
    pub status: Option<u16>,
    /// Pad the metadata with this many bytes.
    pub padding: usize,
    /// How long a loadTable answer takes after the table's state was read.
    pub delay: Duration,
    /// The status of a successful loadTable answer (200 unless set).
    pub ok_status: Option<u16>,
    /// Spell the credential members `Config` and `Storage-Credentials`.
    pub case_members: bool,
    /// More vended keys in `config`, the value made for the caller (`<value>-<caller>`).
    pub extra_config: Vec<(&'static str, &'static str)>,
    /// gzip every answer, whatever the request asked for.
    pub gzip: bool,
    /// Commit answers carry a `config` with keys too.
    pub commit_vends: bool,
    /// How long a commit's answer takes after the commit was applied.
    pub commit_delay: Duration,
    /// Every JSON object answered (errors too) also carries secrets as top-level members,
    /// where no Iceberg answer puts them.
    pub top_level_secrets: bool,
    /// With `top_level_secrets`: each such answer also holds `"\ud800"`, JSON by the grammar
    /// that serde_json (and so icecache) refuses and Python's `json` reads.
    pub unreadable_json: bool,
    /// Every JSON object answered (errors too) carries secret-named members at each of these
    /// paths of member names and list positions (`"metadata/schemas/0/fields/0"`, `""` for the
    /// top level), made where missing; each value names its path: `BURIED-<path>-<caller>-<n>`.
    pub buried: Vec<&'static str>,
    /// The `endpoints` its `/v1/config` lists (none when None, as most catalogs here).
    pub endpoints: Option<Vec<&'static str>>,
    /// Answer `HEAD` on a table or a view with `405` (a catalog without existence checks).
    pub refuses_head: bool,
    /// Its `/v1/config` sets `view-endpoints-supported` in `overrides`.
    pub says_views: bool,
    /// Every JSON object answered is sent in this form instead of UTF-8: `utf-16le` (with a byte
    /// order mark), `utf-16be`, `utf-32le`, `jsonp` (`cb(…)`), `xssi` (`)]}'` first) or `html`.
    pub wrapping: Option<&'static str>,
    /// Every answer also carries headers named like secrets (and AWS's session token header),
    /// each valued `BURIED-header-<name>`.
    pub secret_headers: bool,
    /// The status of its `/v1/config` answer (200 unless set), the body the same.
    pub config_status: Option<u16>,
    /// Headers every answer also carries (a CDN or a cache before the catalog marks its
    /// answers so: `x-cache`, `Cache-Status`).
    pub extra_headers: Vec<(&'static str, &'static str)>,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            vend_always: true,
            lifetime: Duration::from_secs(3600),
            no_store: false,
            content_type: "application/json",
            null_storage_credentials: false,
            etag: false,
            weak_etag: false,
            no_304_after: None,
            vary: None,
            status: None,
            padding: 0,
            delay: Duration::ZERO,
            ok_status: None,
            case_members: false,
            extra_config: Vec::new(),
            gzip: false,
            commit_vends: false,
            commit_delay: Duration::ZERO,
            top_level_secrets: false,
            unreadable_json: false,
            buried: Vec::new(),
            wrapping: None,
            endpoints: None,
            refuses_head: false,
            says_views: false,
            secret_headers: false,
            extra_headers: Vec::new(),
            config_status: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub headers: http::HeaderMap,
}

struct State {
    shape: Mutex<Shape>,
    /// Table name (last path segment) → version; absent = never created or dropped.
    versions: Mutex<HashMap<String, u64>>,
    served: AtomicU64,
    seen: Mutex<Vec<Seen>>,
    record: AtomicBool,
    /// While true, loadTable answers wait (after their delay) until it is false again.
    held: tokio::sync::watch::Sender<bool>,
    /// loadTable requests being answered now, and the most there ever were at once.
    loading: AtomicU64,
    most_loading: AtomicU64,
}

pub struct StandIn {
    pub url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    pub async fn start(shape: Shape) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("stand-in binds");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let state = Arc::new(State {
            shape: Mutex::new(shape),
            versions: Mutex::default(),
            served: AtomicU64::new(0),
            seen: Mutex::default(),
            record: AtomicBool::new(true),
            held: tokio::sync::watch::Sender::new(false),
            loading: AtomicU64::new(0),
            most_loading: AtomicU64::new(0),
        });
        let accept_state = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = accept_state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| answer(state.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        StandIn { url, state, task }
    }

    pub fn reshape(&self, change: impl FnOnce(&mut Shape)) {
        change(&mut self.state.shape.lock().unwrap());
    }

    /// Holds every loadTable and loadCredentials answer until `release_loads`: a fill in flight for as long as a
    /// test needs, without guessing a delay.
    pub fn hold_loads(&self) {
        self.state.held.send_replace(true);
    }

    pub fn release_loads(&self) {
        self.state.held.send_replace(false);
    }

    /// The most loadTable requests this catalog was ever answering at once.
    pub fn most_loads_at_once(&self) -> u64 {
        self.state.most_loading.load(Ordering::SeqCst)
    }

    /// Creates (or resets) a table at version 1.
    pub fn create(&self, table: &str) {
        self.state
            .versions
            .lock()
            .unwrap()
            .insert(table.to_owned(), 1);
    }

    /// Changes a table behind icecache's back (a writer that does not go through it).
    pub fn commit_directly(&self, table: &str) -> u64 {
        bump(&self.state, table)
    }

    pub fn version(&self, table: &str) -> Option<u64> {
        self.state.versions.lock().unwrap().get(table).copied()
    }

    /// Every request received, in order (when recording).
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// loadTable requests received for `table`.
    pub fn loads(&self, table: &str) -> usize {
        let suffix = format!("/tables/{table}");
        self.seen()
            .iter()
            .filter(|s| s.method == Method::GET && s.path.ends_with(&suffix))
            .count()
    }

    /// Stops recording requests (long randomized runs).
    pub fn stop_recording(&self) {
        self.state.record.store(false, Ordering::Relaxed);
    }
}

fn bump(state: &State, table: &str) -> u64 {
    let mut versions = state.versions.lock().unwrap();
    let version = versions.entry(table.to_owned()).or_insert(0);
    *version += 1;
    *version
}

type Answer = Response<Full<Bytes>>;

fn json_answer(status: StatusCode, body: &Value) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn error(status: u16, kind: &str) -> Answer {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_answer(
        status,
        &json!({ "error": { "message": kind, "type": kind, "code": status.as_u16() } }),
    )
}

/// The caller as the stand-in names it in the keys it vends.
fn caller(headers: &http::HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map_or("anonymous".to_owned(), |v| {
            v.trim_start_matches("Bearer ").to_owned()
        })
}

/// A LoadTableResult of `table` at `version`, vending keys for the caller when asked to.
pub fn table_result(
    shape: &Shape,
    table: &str,
    version: u64,
    caller: &str,
    n: u64,
    vend: bool,
) -> Value {
    let expires = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + shape.lifetime;
    let mut config = json!({ "s3.endpoint": "http://s3.local", "client.region": "eu-west-1" });
    let mut storage = json!([]);
    for (key, value) in &shape.extra_config {
        config[*key] = json!(format!("{value}-{caller}-{n}"));
    }
    if vend {
        config["s3.access-key-id"] = json!(format!("AK-{caller}-{n}"));
        config["s3.secret-access-key"] = json!(format!("SK-{caller}-{n}"));
        config["s3.session-token"] = json!(format!("ST-{caller}-{n}"));
        config["s3.session-token-expires-at-ms"] = json!((expires.as_millis() as u64).to_string());
        // A whole set, as a catalog vends one: the Java client refuses half a key pair.
        storage = json!([{ "prefix": format!("s3://bucket/{table}"),
                           "config": { "s3.access-key-id": format!("SC-{caller}-{n}"),
                                       "s3.secret-access-key": format!("SC-{caller}-{n}-secret"),
                                       "s3.session-token": format!("SC-{caller}-{n}-token"),
                                       "s3.session-token-expires-at-ms":
                                           (expires.as_millis() as u64).to_string() } }]);
    }
    let mut body = json!({
        "metadata-location": format!("s3://bucket/{table}/metadata/v{version}.metadata.json"),
        // Table metadata as the Java client reads it (every member a v2 table requires).
        "metadata": {
            "format-version": 2,
            "table-uuid": "6b1b3c3e-0000-4000-8000-000000000001",
            "location": format!("s3://bucket/{table}"),
            "last-sequence-number": 0,
            "last-updated-ms": 1_760_000_000_000u64,
            "last-column-id": 1,
            "current-schema-id": 0,
            "schemas": [{ "type": "struct", "schema-id": 0,
                          "fields": [{ "id": 1, "name": "id", "required": false, "type": "long" }] }],
            "default-spec-id": 0,
            "partition-specs": [{ "spec-id": 0, "fields": [] }],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{ "order-id": 0, "fields": [] }],
            "properties": { "version": version.to_string(), "padding": "x".repeat(shape.padding) },
            "current-snapshot-id": -1,
            "refs": {},
            "snapshots": [],
            "snapshot-log": [],
            "metadata-log": [],
        },
        "config": config,
        "storage-credentials": storage,
    });
    if shape.null_storage_credentials {
        body["storage-credentials"] = Value::Null;
    }
    if shape.case_members {
        if let Some(object) = body.as_object_mut() {
            let config = object.remove("config").unwrap_or_default();
            let storage = object.remove("storage-credentials").unwrap_or_default();
            object.insert("Config".to_owned(), config);
            object.insert("Storage-Credentials".to_owned(), storage);
        }
    }
    body
}

async fn answer(state: Arc<State>, request: Request<Incoming>) -> Result<Answer, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    if state.record.load(Ordering::Relaxed) {
        state.seen.lock().unwrap().push(Seen {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            headers: parts.headers.clone(),
        });
    }
    let shape = state.shape.lock().unwrap().clone();
    // Routed as a servlet catalog routes: `;parameters` dropped from every segment.
    let path = parts
        .uri
        .path()
        .split('/')
        .map(|segment| segment.split(';').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("/");
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let tables_at = segments.iter().position(|s| *s == "tables");
    let who = caller(&parts.headers);
    let n = state.served.fetch_add(1, Ordering::Relaxed) + 1;
    let answer = match (&parts.method, tables_at.map(|i| &segments[i + 1..])) {
        (&Method::GET, _) if path == "/v1/config" => {
            let mut config = json!({ "defaults": { "s3.secret-access-key": format!("CFGSK-{who}"), "s3.endpoint": "e" },
                                     "overrides": { "uri": "http://elsewhere:1" } });
            if let Some(endpoints) = &shape.endpoints {
                config["endpoints"] = json!(endpoints);
            }
            if shape.says_views {
                config["overrides"]["view-endpoints-supported"] = json!("true");
            }
            let status = shape.config_status.unwrap_or(200);
            json_answer(StatusCode::from_u16(status).expect("a status"), &config)
        }
        (&Method::HEAD, _) if shape.refuses_head => error(405, "MethodNotAllowed"),
        (&Method::GET, None) if path.ends_with("/something/else") => json_answer(
            StatusCode::OK,
            &json!({ "config": { "s3.access-key-id": format!("AK-{who}-{n}") },
                     "nested": { "x": { "s3.secret-access-key": format!("SK-{who}-{n}"), "keep": "k" } } }),
        ),
        (&Method::POST, Some([_, "plan"])) => json_answer(
            StatusCode::OK,
            &json!({ "status": "completed", "plan-tasks": [],
                     "storage-credentials": [{ "prefix": "s3://bucket",
                        "config": { "s3.access-key-id": format!("AK-{who}-{n}") } }] }),
        ),
        (&Method::GET, Some([table])) => {
            let now = state.loading.fetch_add(1, Ordering::SeqCst) + 1;
            state.most_loading.fetch_max(now, Ordering::SeqCst);
            let _done = Loading(&state.loading);
            let answer = load(&state, &shape, &parts.headers, table, &who, n);
            // The state is read first, then the answer takes its time: a write can land and be
            // answered while this older answer is still on its way.
            tokio::time::sleep(shape.delay).await;
            let _ = state.held.subscribe().wait_for(|held| !held).await;
            answer
        }
        (&Method::POST, Some([])) => {
            // createTable: the answer is a LoadTableResult, with credentials.
            let name = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|b| b["name"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "created".to_owned());
            let version = bump(&state, &name);
            json_answer(
                StatusCode::OK,
                &table_result(&shape, &name, version, &who, n, true),
            )
        }
        (&Method::POST, Some([table])) => {
            if who == "forbidden" {
                error(403, "ForbiddenException")
            } else if state.versions.lock().unwrap().contains_key(*table) {
                let version = bump(&state, table);
                let mut result = table_result(&shape, table, version, &who, n, shape.commit_vends);
                if !shape.commit_vends {
                    if let Some(object) = result.as_object_mut() {
                        object.remove("config");
                        object.remove("storage-credentials");
                    }
                }
                // Applied first, answered later: a client may give up in between.
                tokio::time::sleep(shape.commit_delay).await;
                json_answer(StatusCode::OK, &result)
            } else {
                error(404, "NoSuchTableException")
            }
        }
        (&Method::DELETE, Some([table])) => {
            state.versions.lock().unwrap().remove(*table);
            Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Full::new(Bytes::new()))
                .unwrap()
        }
        (&Method::GET, Some([table, "credentials"])) => {
            let (list, prefix) = if shape.case_members {
                ("Storage-Credentials", "Prefix")
            } else {
                ("storage-credentials", "prefix")
            };
            let exists = state.versions.lock().unwrap().contains_key(*table);
            let expires = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + shape.lifetime;
            // The plan the keys were vended for, when the caller named one.
            let plan = parts.uri.query().unwrap_or("").to_owned();
            let mut answer = match (exists, shape.status) {
                (false, _) => error(404, "NoSuchTableException"),
                (true, Some(status)) => error(status, "ServiceFailureException"),
                (true, None) => json_answer(
                    StatusCode::OK,
                    &json!({ list: [{ prefix: format!("s3://bucket/{table}"),
                        "config": { "s3.access-key-id": format!("AK-{who}-{n}"),
                                    "s3.secret-access-key": format!("SK-{who}-{n}"),
                                    "s3.session-token-expires-at-ms":
                                        (expires.as_millis() as u64).to_string(),
                                    "plan": plan } }] }),
                ),
            };
            if shape.no_store {
                answer
                    .headers_mut()
                    .insert("cache-control", http::HeaderValue::from_static("no-store"));
            }
            answer.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static(shape.content_type),
            );
            if let Some(vary) = shape.vary {
                answer
                    .headers_mut()
                    .insert("vary", http::HeaderValue::from_static(vary));
            }
            // Refreshes wait while loads are held: a herd in flight for as long as a test needs.
            tokio::time::sleep(shape.delay).await;
            let _ = state.held.subscribe().wait_for(|held| !held).await;
            answer
        }
        (&Method::GET, None) if segments.iter().rev().nth(1) == Some(&"views") => {
            let view = segments.last().copied().unwrap_or_default();
            match state.versions.lock().unwrap().get(view).copied() {
                Some(version) => json_answer(StatusCode::OK, &view_result(view, version, &who, n)),
                None => error(404, "NoSuchViewException"),
            }
        }
        (&Method::POST, _) if path.ends_with("/register") => {
            let name = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|b| b["name"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "registered".to_owned());
            let version = bump(&state, &name);
            json_answer(
                StatusCode::OK,
                &table_result(&shape, &name, version, &who, n, true),
            )
        }
        (&Method::POST, _) if path.ends_with("/transactions/commit") => {
            let changes = serde_json::from_slice::<Value>(&body).unwrap_or_default();
            for change in changes["table-changes"].as_array().into_iter().flatten() {
                if let Some(name) = change["identifier"]["name"].as_str() {
                    bump(&state, name);
                }
            }
            Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Full::new(Bytes::new()))
                .unwrap()
        }
        _ => error(404, "NotFoundException"),
    };
    let answer = if shape.buried.is_empty() {
        answer
    } else {
        with_buried_secrets(answer, &shape.buried, &who, n)
    };
    let answer = if shape.top_level_secrets {
        with_top_level_secrets(answer, &who, n, shape.unreadable_json)
    } else {
        answer
    };
    let answer = match shape.wrapping {
        Some(wrapping) => wrapped(answer, wrapping),
        None => answer,
    };
    let mut answer = if shape.gzip { gzipped(answer) } else { answer };
    for (name, value) in &shape.extra_headers {
        answer.headers_mut().append(
            http::HeaderName::from_static(name),
            http::HeaderValue::from_static(value),
        );
    }
    if shape.secret_headers {
        for name in SECRET_HEADERS {
            let value = format!("BURIED-header-{name}");
            answer.headers_mut().insert(
                http::HeaderName::from_static(name),
                http::HeaderValue::from_str(&value).expect("a header value"),
            );
        }
    }
    Ok(answer)
}

/// Headers no catalog should send, sent by `secret_headers`.
const SECRET_HEADERS: [&str; 6] = [
    "s3.secret-access-key",
    "token",
    "x-amz-security-token",
    "credential",
    "authorization",
    "password",
];

/// The answer with secrets beside its members, if it is a JSON object.
fn with_top_level_secrets(answer: Answer, who: &str, n: u64, unreadable: bool) -> Answer {
    let (mut parts, body) = answer.into_parts();
    let bytes = futures::executor::block_on(body.collect())
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Full::new(bytes));
    };
    object.insert(
        "s3.secret-access-key".into(),
        json!(format!("SK-top-{who}-{n}")),
    );
    object.insert(
        "S3.Session-Token".into(),
        json!(format!("ST-top-{who}-{n}")),
    );
    object.insert("token".into(), json!(format!("SC-top-{who}-{n}")));
    parts.headers.remove("content-length");
    let mut text = Value::Object(object).to_string();
    if unreadable {
        text.pop();
        text.push_str(r#","x":"\ud800"}"#);
    }
    Response::from_parts(parts, Full::new(Bytes::from(text)))
}

/// A LoadViewResult of `view` at `version` (its `config` vends a key, as a catalog may).
fn view_result(view: &str, version: u64, who: &str, n: u64) -> Value {
    json!({
        "metadata-location": format!("s3://bucket/{view}/metadata/v{version}.metadata.json"),
        "metadata": {
            "view-uuid": "6b1b3c3e-0000-4000-8000-000000000002",
            "format-version": 1,
            "location": format!("s3://bucket/{view}"),
            "current-version-id": 1,
            "versions": [], "version-log": [], "schemas": [],
            "properties": { "version": version.to_string() },
        },
        "config": { "s3.endpoint": "http://s3.local", "s3.access-key-id": format!("AK-{who}-{n}") },
    })
}

/// The answer with secret-named members buried at each path, if it is a JSON object.
fn with_buried_secrets(answer: Answer, paths: &[&str], who: &str, n: u64) -> Answer {
    let (mut parts, body) = answer.into_parts();
    let bytes = futures::executor::block_on(body.collect())
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let Ok(mut value @ Value::Object(_)) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Full::new(bytes));
    };
    for path in paths {
        let mut at = &mut value;
        for segment in path.split('/').filter(|s| !s.is_empty()) {
            at = match segment.parse::<usize>() {
                Ok(index) => {
                    if !at.is_array() {
                        *at = json!([]);
                    }
                    let list = at.as_array_mut().unwrap();
                    while list.len() <= index {
                        list.push(json!({}));
                    }
                    &mut list[index]
                }
                Err(_) => {
                    if !at.is_object() {
                        *at = json!({});
                    }
                    at.as_object_mut()
                        .unwrap()
                        .entry(segment)
                        .or_insert_with(|| json!({}))
                }
            };
        }
        if !at.is_object() {
            *at = json!({});
        }
        let marker = format!("BURIED-{path}-{who}-{n}");
        let object = at.as_object_mut().unwrap();
        object.insert("S3.Secret-Access-Key".into(), json!(marker.clone()));
        object.insert("adls.sas-token.account".into(), json!(marker.clone()));
        object.insert("token".into(), json!(marker));
    }
    parts.headers.remove("content-length");
    Response::from_parts(parts, Full::new(Bytes::from(value.to_string())))
}

/// A JSON answer in another encoding or wrapper (`Shape::wrapping`).
fn wrapped(answer: Answer, wrapping: &str) -> Answer {
    let (mut parts, body) = answer.into_parts();
    let bytes = futures::executor::block_on(body.collect())
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Response::from_parts(parts, Full::new(bytes));
    };
    if !text.starts_with('{') {
        return Response::from_parts(parts, Full::new(bytes));
    }
    let out: Vec<u8> = match wrapping {
        "utf-16le" => [0xff, 0xfe]
            .into_iter()
            .chain(text.encode_utf16().flat_map(u16::to_le_bytes))
            .collect(),
        "utf-16be" => text.encode_utf16().flat_map(u16::to_be_bytes).collect(),
        "utf-32le" => text
            .chars()
            .flat_map(|c| (c as u32).to_le_bytes())
            .collect(),
        "jsonp" => format!("cb({text})").into_bytes(),
        "xssi" => format!(")]}}'\n{text}").into_bytes(),
        "html" => format!("<html><body><pre>{text}</pre></body></html>").into_bytes(),
        other => panic!("unknown wrapping {other}"),
    };
    parts.headers.remove("content-length");
    Response::from_parts(parts, Full::new(Bytes::from(out)))
}

/// The answer gzip-encoded, as a catalog that ignores `Accept-Encoding` would send it.
fn gzipped(answer: Answer) -> Answer {
    use std::io::Write;
    let (mut parts, body) = answer.into_parts();
    let bytes = futures::executor::block_on(body.collect())
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    if bytes.is_empty() {
        return Response::from_parts(parts, Full::new(bytes));
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(&bytes).unwrap();
    parts
        .headers
        .insert("content-encoding", http::HeaderValue::from_static("gzip"));
    parts.headers.remove("content-length");
    Response::from_parts(parts, Full::new(Bytes::from(encoder.finish().unwrap())))
}

fn load(
    state: &State,
    shape: &Shape,
    headers: &http::HeaderMap,
    table: &str,
    who: &str,
    n: u64,
) -> Answer {
    if who == "forbidden" {
        return error(403, "ForbiddenException");
    }
    if let Some(status) = shape.status {
        return error(status, "StandInRefusal");
    }
    let Some(version) = state.versions.lock().unwrap().get(table).copied() else {
        return error(404, "NoSuchTableException");
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let tag = if shape.weak_etag {
        format!("W/\"v{version}.{now_ms}\"")
    } else {
        format!("\"v{version}\"")
    };
    if shape.etag
        && headers
            .get("if-none-match")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|sent| still_names(shape, sent, version, now_ms))
    {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
            .headers_mut()
            .insert("etag", http::HeaderValue::from_str(&tag).unwrap());
        return response;
    }
    let vend = shape.vend_always || headers.contains_key("x-iceberg-access-delegation");
    let body = table_result(shape, table, version, who, n, vend);
    let status = shape
        .ok_status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut response = json_answer(status, &body);
    let h = response.headers_mut();
    h.insert(
        "content-type",
        http::HeaderValue::from_static(shape.content_type),
    );
    if shape.no_store {
        h.insert("cache-control", http::HeaderValue::from_static("no-store"));
    }
    if shape.etag {
        h.insert("etag", http::HeaderValue::from_str(&tag).unwrap());
    }
    if let Some(vary) = shape.vary {
        h.insert("vary", http::HeaderValue::from_static(vary));
    }
    response
}

/// Counts a loadTable as answered however its handler ends (a client gone drops it).
struct Loading<'a>(&'a AtomicU64);

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether an `If-None-Match` the stand-in receives names `version` (weakly when its tags are
/// weak), within `no_304_after` of when the tag was made.
fn still_names(shape: &Shape, sent: &str, version: u64, now_ms: u128) -> bool {
    if !shape.weak_etag {
        return sent == format!("\"v{version}\"");
    }
    sent.split(',').any(|tag| {
        let opaque = tag.trim().trim_start_matches("W/").trim_matches('"');
        let Some((v, made)) = opaque.strip_prefix('v').and_then(|o| o.split_once('.')) else {
            return false;
        };
        let young = made.parse::<u128>().is_ok_and(|made| {
            shape
                .no_304_after
                .is_none_or(|limit| now_ms.saturating_sub(made) < limit.as_millis())
        });
        v == version.to_string() && young
    })
}

/// The version a LoadTableResult (or CommitTableResponse) body says its table is at.
pub fn version_of(body: &Value) -> Option<u64> {
    body["metadata"]["properties"]["version"]
        .as_str()
        .and_then(|v| v.parse().ok())
}

/// Every vended key value in a body (`AK-…`, `SK-…`, `ST-…`, `SC-…`), wherever it sits.
pub fn vended_keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    for marker in ["AK-", "SK-", "ST-", "SC-"] {
        for (i, _) in text.match_indices(marker) {
            let key: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            keys.push(key);
        }
    }
    keys
}
