//! A minimal hyper server that answers every GET with the same bytes from memory: the
//! static-bytes ceiling of the load benchmark, and the upstream fixture that icecache and nginx
//! sit in front of. `GET /__count` answers how many other requests it served.
//!
//! cargo bench --bench fixture_server -- LISTEN BODY_FILE [ETAG] [DELAY_MS]

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

struct Fixture {
    body: Bytes,
    etag: Option<HeaderValue>,
    delay: Duration,
    served: AtomicU64,
}

fn answer(fixture: &Fixture, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.uri().path() == "/__count" {
        return Response::new(Full::new(Bytes::from(
            fixture.served.load(Ordering::Relaxed).to_string(),
        )));
    }
    fixture.served.fetch_add(1, Ordering::Relaxed);
    let matches = fixture.etag.as_ref().is_some_and(|etag| {
        request
            .headers()
            .get(header::IF_NONE_MATCH)
            .is_some_and(|v| v == etag)
    });
    let mut response = if matches {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        Response::new(Full::new(fixture.body.clone()))
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(etag) = &fixture.etag {
        headers.insert(header::ETAG, etag.clone());
    }
    response
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [listen, body_file, rest @ ..] = args.as_slice() else {
        eprintln!("usage: fixture_server LISTEN BODY_FILE [ETAG] [DELAY_MS]");
        std::process::exit(64);
    };
    let fixture = Arc::new(Fixture {
        body: Bytes::from(std::fs::read(body_file).expect("body file")),
        etag: rest
            .first()
            .filter(|e| !e.is_empty())
            .map(|e| HeaderValue::from_str(e).expect("etag")),
        delay: Duration::from_millis(rest.get(1).map_or(0, |d| d.parse().expect("delay ms"))),
        served: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind(listen).await.expect("bind");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let fixture = fixture.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let fixture = fixture.clone();
                async move {
                    if !fixture.delay.is_zero() && request.uri().path() != "/__count" {
                        tokio::time::sleep(fixture.delay).await;
                    }
                    Ok::<_, Infallible>(answer(&fixture, &request))
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
