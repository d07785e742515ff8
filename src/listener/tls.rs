//! TLS with rustls on both sides: the proxy listener (optionally verifying client certificates)
//! with certificates reloaded when their files change, and the connection to an HTTPS catalog.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use std::time::{Duration, SystemTime};

use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;
use tokio::sync::watch;

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path} holds no {what}")]
    Empty { path: PathBuf, what: &'static str },
    #[error("TLS setup failed: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client certificate verifier: {0}")]
    Verifier(String),
}

/// Paths of the listener's certificate, key and (for mTLS) client CA bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub reload_every: Duration,
}

/// Paths for the connection to an HTTPS catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTls {
    /// CA bundle to trust instead of the platform's roots.
    pub ca: Option<PathBuf>,
    /// Client certificate and key to present to the catalog, reloaded when they change.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    pub reload_every: Duration,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_error(path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::Read {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| read_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.to_owned(),
            what: "PEM certificate",
        });
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| read_error(path, e))
}

fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path)? {
        store.add(cert)?;
    }
    Ok(store)
}

fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    Ok(CertifiedKey::from_der(
        certificates(cert)?,
        private_key(key)?,
        &provider(),
    )?)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The listener's certificate, swapped for the files' new contents when they change.
#[derive(Debug)]
pub struct ReloadingCert {
    current: ArcSwap<CertifiedKey>,
    cert: PathBuf,
    key: PathBuf,
    seen: Mutex<(Option<SystemTime>, Option<SystemTime>)>,
}

impl ReloadingCert {
    fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let seen = (modified(cert), modified(key));
        Ok(ReloadingCert {
            current: ArcSwap::from_pointee(certified_key(cert, key)?),
            cert: cert.to_owned(),
            key: key.to_owned(),
            seen: Mutex::new(seen),
        })
    }

    /// Reloads when either file's modification time moved. A pair that does not load (a
    /// half-written rotation, say) keeps the old certificate and is tried again next time.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = (modified(&self.cert), modified(&self.key));
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == now {
            return Ok(false);
        }
        let fresh = certified_key(&self.cert, &self.key)?;
        self.current.store(Arc::new(fresh));
        *seen = now;
        Ok(true)
    }
}

impl ReloadingCert {
    fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for ReloadingCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// The listener's rustls configuration: ALPN h2 and http/1.1, client certificates verified
/// against `client_ca` when one is given.
pub fn server_config(tls: &ListenerTls) -> Result<(ServerConfig, Arc<ReloadingCert>), TlsError> {
    let cert = Arc::new(ReloadingCert::load(&tls.cert, &tls.key)?);
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let builder = match &tls.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()
                    .map_err(|e| TlsError::Verifier(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, cert))
}

/// Checks the certificate files every `every` until `shutdown`.
pub async fn watch_certificate(
    cert: Arc<ReloadingCert>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ticks.tick() => match cert.reload_if_changed() {
                Ok(true) => tracing::info!(cert = %cert.cert.display(), "TLS certificate reloaded"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "TLS certificate changed but does not load; keeping the old one"),
            },
            changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { return },
        }
    }
}

/// The client configuration toward an HTTPS catalog: the platform's roots or the given bundle,
/// and a client certificate when one is configured (returned too, for reloading).
pub fn client_config(
    tls: &UpstreamTls,
) -> Result<(ClientConfig, Option<Arc<ReloadingCert>>), TlsError> {
    let roots = match &tls.ca {
        Some(ca) => roots(ca)?,
        None => {
            let mut store = RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                // A platform certificate rustls cannot use is skipped, not fatal.
                let _ = store.add(cert);
            }
            store
        }
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    // hyper-rustls sets ALPN itself from the protocols the connector enables.
    Ok(match &tls.client_cert {
        Some((cert, key)) => {
            let cert = Arc::new(ReloadingCert::load(cert, key)?);
            (builder.with_client_cert_resolver(cert.clone()), Some(cert))
        }
        None => (builder.with_no_client_auth(), None),
    })
}
