//! A minimal HTTP/1 server for the few catalog behaviours no catalog that runs here can be made
//! to show (vended credentials with a chosen expiry, a `uri` in `/v1/config`). Each test says
//! what its fake stands in for.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

pub struct Fake {
    pub url: String,
    requests: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<http::HeaderMap>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Fake {
    /// Serves `answer(request, n)` where n counts requests from 1.
    pub async fn start<F>(answer: F) -> Fake
    where
        F: Fn(&Request<Incoming>, u64) -> Response<Full<Bytes>> + Send + Sync + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicU64::new(0));
        let counter = requests.clone();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = seen.clone();
        let answer = Arc::new(answer);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (counter, answer, recorder) =
                    (counter.clone(), answer.clone(), recorder.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                        recorder.lock().unwrap().push(request.headers().clone());
                        let response = answer(&request, n);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Fake {
            url,
            requests,
            seen,
            task,
        }
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// The headers of every request received, in order.
    pub fn headers(&self) -> Vec<http::HeaderMap> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A JSON response.
pub fn json(body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    response.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    response
}
