//! `icecache probe URL`: a health check that needs nothing but the binary (container images
//! without curl).

use std::time::Duration;

use http::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use thiserror::Error;

use crate::wire::body::{empty, Body};

#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("{0:?} is not an http:// URL")]
    BadUrl(String),
    #[error("{0}")]
    Failed(String),
    #[error("answered {0}")]
    Status(http::StatusCode),
}

const TIMEOUT: Duration = Duration::from_secs(2);

/// GETs `url`; Ok on a 2xx answer within two seconds.
pub fn probe(url: &str) -> Result<(), ProbeError> {
    let uri: Uri = url
        .parse()
        .map_err(|_| ProbeError::BadUrl(url.to_owned()))?;
    if uri.scheme_str() != Some("http") {
        return Err(ProbeError::BadUrl(url.to_owned()));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ProbeError::Failed(e.to_string()))?;
    runtime.block_on(async {
        let client: Client<_, Body> = Client::builder(TokioExecutor::new()).build_http();
        let request = Request::get(uri)
            .body(empty())
            .map_err(|e| ProbeError::Failed(e.to_string()))?;
        let response = tokio::time::timeout(TIMEOUT, client.request(request))
            .await
            .map_err(|_| ProbeError::Failed(format!("no answer within {TIMEOUT:?}")))?
            .map_err(|e| ProbeError::Failed(e.to_string()))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(ProbeError::Status(response.status()))
        }
    })
}
