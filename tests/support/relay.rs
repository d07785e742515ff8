//! A counting relay between icecache and the real catalog: it forwards every request unchanged
//! and records what icecache asked for, so tests count upstream calls without trusting
//! icecache's own metrics. It can also delay each request (a slow catalog) or stop (a catalog
//! that went away); the answers themselves always come from the real catalog.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::{combinators::BoxBody, BodyExt};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

type Body = BoxBody<Bytes, hyper::Error>;

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path_and_query: String,
    pub headers: http::HeaderMap,
}

struct State {
    upstream: String,
    client: Client<HttpConnector, Body>,
    seen: Mutex<Vec<Seen>>,
    statuses: Mutex<Vec<u16>>,
    delay_ms: AtomicU64,
    request_body_bytes: Arc<AtomicU64>,
    /// When set, response bodies stop after their first frame until `release` is notified.
    hold_responses: Mutex<Option<Arc<Notify>>>,
    /// When set, the next GET's response body stops after its first frame until notified.
    hold_next_get: Mutex<Option<Arc<Notify>>>,
    tasks: Mutex<Vec<AbortHandle>>,
}

pub struct Relay {
    pub url: String,
    state: Arc<State>,
}

impl Relay {
    pub async fn start(upstream: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("relay binds");
        let url = format!("http://{}", listener.local_addr().expect("relay address"));
        let state = Arc::new(State {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
            seen: Mutex::default(),
            statuses: Mutex::default(),
            delay_ms: AtomicU64::new(0),
            request_body_bytes: Arc::default(),
            hold_responses: Mutex::default(),
            hold_next_get: Mutex::default(),
            tasks: Mutex::default(),
        });
        let accept_state = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let conn_state = accept_state.clone();
                let conn = tokio::spawn(async move {
                    let service = service_fn(move |request| relay(conn_state.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                accept_state.tasks.lock().unwrap().push(conn.abort_handle());
            }
        });
        state.tasks.lock().unwrap().push(accept.abort_handle());
        Relay { url, state }
    }

    /// Requests seen whose method is `method` and whose path ends with `path_suffix`.
    pub fn count(&self, method: &str, path_suffix: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| {
                s.method == method
                    && s.path_and_query
                        .split('?')
                        .next()
                        .unwrap_or("")
                        .ends_with(path_suffix)
            })
            .count()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// The status of every answer the catalog gave, in order.
    pub fn statuses(&self) -> Vec<u16> {
        self.state.statuses.lock().unwrap().clone()
    }

    pub fn set_delay(&self, delay: Duration) {
        self.state
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    pub fn request_body_bytes(&self) -> u64 {
        self.state.request_body_bytes.load(Ordering::Relaxed)
    }

    /// From now on, each response body pauses after its first frame until the returned handle
    /// is notified: a catalog that sends a large body slowly.
    pub fn hold_responses(&self) -> Arc<Notify> {
        let release = Arc::new(Notify::new());
        *self.state.hold_responses.lock().unwrap() = Some(release.clone());
        release
    }

    /// The next GET's response pauses after its first frame until the returned handle is
    /// notified; later requests pass as usual. The catalog has answered (its state is fixed)
    /// but the answer is still on its way.
    pub fn hold_next_get(&self) -> Arc<Notify> {
        let release = Arc::new(Notify::new());
        *self.state.hold_next_get.lock().unwrap() = Some(release.clone());
        release
    }

    /// Closes the port and every open connection: the catalog is gone.
    pub fn stop(&self) {
        for task in self.state.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn relay(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = request.into_parts();
    let hold_this = if parts.method == http::Method::GET {
        state.hold_next_get.lock().unwrap().take()
    } else {
        None
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/".to_owned(), |pq| pq.as_str().to_owned());
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path_and_query: path_and_query.clone(),
        headers: parts.headers.clone(),
    });
    let delay = state.delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    parts.uri = format!("{}{}", state.upstream, path_and_query)
        .parse::<Uri>()
        .expect("upstream URI");
    parts.headers.remove(http::header::HOST);
    let counter = state.request_body_bytes.clone();
    let body = body
        .map_frame(move |frame: Frame<Bytes>| {
            if let Some(data) = frame.data_ref() {
                counter.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            frame
        })
        .boxed();
    match state.client.request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            state
                .statuses
                .lock()
                .unwrap()
                .push(response.status().as_u16());
            let hold = hold_this.or_else(|| state.hold_responses.lock().unwrap().clone());
            Ok(match hold {
                None => response.map(|b| b.boxed()),
                Some(release) => {
                    // Chunked, so that the receiver cannot know the body is whole before the
                    // last chunk, which waits for the release.
                    let (mut parts, body) = response.into_parts();
                    parts.headers.remove(http::header::CONTENT_LENGTH);
                    Response::from_parts(parts, held_after_first_frame(body, release))
                }
            })
        }
        Err(e) => {
            let mut response = Response::new(
                http_body_util::Full::new(Bytes::from(format!("relay: {e}")))
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *response.status_mut() = http::StatusCode::BAD_GATEWAY;
            Ok(response)
        }
    }
}

fn held_after_first_frame(body: Incoming, release: Arc<Notify>) -> Body {
    let frames = futures::stream::unfold(
        (body, release, 0usize),
        |(mut body, release, n)| async move {
            if n == 1 {
                release.notified().await;
            }
            let frame = body.frame().await?;
            Some((frame, (body, release, n + 1)))
        },
    );
    http_body_util::StreamBody::new(frames).boxed()
}
