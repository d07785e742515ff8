//! Writing `ETag` in exactly that case on HTTP/1.1.
//!
//! The Iceberg Java client 1.11.0 reads the `ETag` header case-sensitively (apache/iceberg#17978)
//! while hyper lowercases header names. hyper's HTTP/1 encoder writes a name in its original
//! case when the response's extensions carry the case map that its own HTTP/1 parser records
//! (whether or not the server connection preserves the case of requests); that map's type is
//! private. So at start-up icecache parses one canned response that spells `ETag`, keeps its
//! extensions, and sets a clone of them on every response it builds with `ETag` as a field of
//! its own. The map holds that one name: the encoder looks up every name it writes in it, and
//! every answer copies it. A hit's HTTP/1.x head spells `ETag` itself and needs no map
//! (`wire::packed`).

use http::{Extensions, Request};
use http_body_util::Empty;
use hyper::body::Bytes;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Error)]
#[error("could not record header case: {0}")]
pub struct HeaderCaseError(String);

const CANNED: &[u8] = b"HTTP/1.1 200 OK\r\nETag: \"x\"\r\n\r\n";

/// Extensions that make hyper's HTTP/1 server write `ETag` in that case (other names go in
/// lower case).
pub async fn canonical_case_extensions() -> Result<Extensions, HeaderCaseError> {
    let (client_io, mut server_io) = tokio::io::duplex(4096);
    let server = tokio::spawn(async move {
        let mut request = [0u8; 1024];
        let _ = server_io.read(&mut request).await;
        let _ = server_io.write_all(CANNED).await;
    });
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake(hyper_util::rt::TokioIo::new(client_io))
        .await
        .map_err(|e| HeaderCaseError(e.to_string()))?;
    let driver = tokio::spawn(connection);
    let request = Request::get("/")
        .body(Empty::<Bytes>::new())
        .map_err(|e| HeaderCaseError(e.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| HeaderCaseError(e.to_string()))?;
    let extensions = response.extensions().clone();
    drop(sender);
    let _ = server.await;
    driver.abort();
    Ok(extensions)
}
