//! The floor of the load benchmark: a server that does as little as an HTTP/1.1 keep-alive
//! server can and still answer wrk. Thread per core like icecache (one current-thread runtime
//! and one SO_REUSEPORT listener per core), it only finds where each request head ends and
//! writes fixed bytes: a 304 when the head carries the ETag, else the body. No parsing, no
//! routing, no cache, no headers built. What it spends per request is what the machine, the
//! kernel's loopback and the runtime cost; no server that reads HTTP can spend less.
//!
//! With `hyper` as the last argument it answers the same through hyper's HTTP/1.1 server
//! instead (same runtimes, same answers, a trivial service): what hyper alone costs, the
//! floor of any server built on it, icecache included.
//!
//! cargo bench --bench floor_server -- LISTEN BODY_FILE ETAG [hyper]

use std::convert::Infallible;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Answers {
    etag: Vec<u8>,
    ok_head: Vec<u8>,
    body: Bytes,
    not_modified: Vec<u8>,
}

fn answers(body: Vec<u8>, etag: &str) -> Answers {
    let ok_head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nETag: {etag}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let not_modified = format!("HTTP/1.1 304 Not Modified\r\nETag: {etag}\r\n\r\n");
    Answers {
        etag: etag.as_bytes().to_vec(),
        ok_head: ok_head.into_bytes(),
        body: Bytes::from(body),
        not_modified: not_modified.into_bytes(),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn serve(mut stream: TcpStream, answers: Arc<Answers>) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut filled = 0;
    loop {
        let n = stream.read(&mut buffer[filled..]).await?;
        if n == 0 {
            return Ok(());
        }
        filled += n;
        // Every complete head gets its answer; wrk does not pipeline, but a split read might.
        while let Some(end) = find(&buffer[..filled], b"\r\n\r\n") {
            let head = &buffer[..end];
            if find(head, &answers.etag).is_some() {
                stream.write_all(&answers.not_modified).await?;
            } else {
                write_both(&mut stream, &answers.ok_head, &answers.body).await?;
            }
            buffer.copy_within(end + 4..filled, 0);
            filled -= end + 4;
        }
        if filled == buffer.len() {
            return Ok(()); // a head larger than the buffer: not a benchmark request
        }
    }
}

/// The same answers through hyper.
async fn serve_hyper(stream: TcpStream, answers: Arc<Answers>) {
    let service = service_fn(move |request: Request<Incoming>| {
        let answers = answers.clone();
        async move {
            let matches = request
                .headers()
                .get(header::IF_NONE_MATCH)
                .is_some_and(|v| v.as_bytes() == answers.etag.as_slice());
            let etag = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(&answers.etag));
            let mut response = if matches {
                let mut r = Response::new(Full::new(Bytes::new()));
                *r.status_mut() = StatusCode::NOT_MODIFIED;
                r
            } else {
                let mut r = Response::new(Full::new(answers.body.clone()));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                r
            };
            if let Ok(etag) = etag {
                response.headers_mut().insert(header::ETAG, etag);
            }
            Ok::<_, Infallible>(response)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// The head and the body in one `writev`, as hyper writes them.
async fn write_both(stream: &mut TcpStream, head: &[u8], body: &[u8]) -> std::io::Result<()> {
    let total = head.len() + body.len();
    let mut written = 0;
    while written < total {
        let n = if written < head.len() {
            let slices = [IoSlice::new(&head[written..]), IoSlice::new(body)];
            stream.write_vectored(&slices).await?
        } else {
            stream.write(&body[written - head.len()..]).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        written += n;
    }
    Ok(())
}

fn listener(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let (listen, body_file, etag, through_hyper) = match args.as_slice() {
        [listen, body_file, etag] => (listen, body_file, etag, false),
        [listen, body_file, etag, mode] if mode == "hyper" => (listen, body_file, etag, true),
        _ => {
            eprintln!("usage: floor_server LISTEN BODY_FILE ETAG [hyper]");
            std::process::exit(64);
        }
    };
    let address: SocketAddr = listen.parse().expect("listen address");
    let answers = Arc::new(answers(std::fs::read(body_file).expect("body file"), etag));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<_> = (0..cores)
        .map(|_| {
            let answers = answers.clone();
            let std_listener = listener(address).expect("bind");
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()
                    .expect("runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("listener");
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let _ = stream.set_nodelay(true);
                        if through_hyper {
                            tokio::spawn(serve_hyper(stream, answers.clone()));
                        } else {
                            tokio::spawn(serve(stream, answers.clone()));
                        }
                    }
                });
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
}
