//! HTTPS on both sides with certificates made at test time (rcgen): the proxy listener with
//! ALPN, client-certificate verification and rotation on disk; an HTTPS catalog upstream (a
//! second icecache with TLS in front of SeaweedFS), with its CA and a client certificate.

use std::path::PathBuf;

use crate::support::relay::Relay;
use crate::support::{catalog, unique, Icecache};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

pub(crate) struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A leaf certificate and key, PEM, for a server (SANs) or a client (no SANs).
    fn issue(&self, name: &str, server: bool) -> (String, String) {
        let sans = if server {
            vec!["localhost".to_owned(), "127.0.0.1".to_owned()]
        } else {
            Vec::new()
        };
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub(crate) fn pem(&self) -> String {
        self.cert.pem()
    }
}

/// A directory of PEM files, removed when dropped.
pub(crate) struct Files(PathBuf);

impl Files {
    pub(crate) fn new() -> Files {
        let dir = std::env::temp_dir().join(unique("icecache-tls"));
        std::fs::create_dir_all(&dir).unwrap();
        Files(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        // Written beside and renamed, as a rotation tool would, so no reader sees half a file.
        let partial = self.0.join(format!("{name}.partial"));
        std::fs::write(&partial, text).unwrap();
        std::fs::rename(&partial, &path).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn client(ca: &Ca, identity: Option<(&str, &str)>) -> reqwest::Client {
    install_crypto();
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
        .tls_info(true)
        .pool_max_idle_per_host(0);
    if let Some((cert, key)) = identity {
        builder = builder
            .identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

fn https(icecache: &Icecache) -> String {
    icecache.url.replace("http://", "https://")
}

fn peer_certificate(response: &reqwest::Response) -> Vec<u8> {
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("a TLS peer certificate")
        .to_vec()
}

fn der(pem: &str) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

pub(crate) async fn tls_icecache(
    upstream: &str,
    files: &Files,
    ca: &Ca,
    extra: &[&str],
) -> (Icecache, String) {
    let (cert, key) = ca.issue("icecache", true);
    let cert_path = files.write("server.pem", &cert);
    let key_path = files.write("server.key", &key);
    let mut flags = vec!["--tls-cert", &cert_path, "--tls-key", &key_path];
    flags.extend_from_slice(extra);
    (Icecache::start(upstream, &flags).await, cert)
}

#[tokio::test]
async fn the_listener_serves_https_and_offers_h2_by_alpn() {
    let ca = Ca::new("test ca");
    let files = Files::new();
    let (icecache, _) = tls_icecache(&catalog(), &files, &ca, &[]).await;
    let response = client(&ca, None)
        .get(format!("{}/v1/config", https(&icecache)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    let plain = reqwest::get(format!("{}/v1/config", icecache.url)).await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}

#[tokio::test]
async fn the_catalog_learns_the_client_came_over_https() {
    let relay = Relay::start(&catalog()).await;
    let ca = Ca::new("test ca");
    let files = Files::new();
    let (icecache, _) = tls_icecache(&relay.url, &files, &ca, &[]).await;
    client(&ca, None)
        .get(format!("{}/v1/config", https(&icecache)))
        .send()
        .await
        .unwrap();
    let seen = relay.seen();
    assert_eq!(seen[0].headers["x-forwarded-proto"], "https");
}

#[tokio::test]
async fn with_a_client_ca_only_clients_it_signed_get_in() {
    let ca = Ca::new("test ca");
    let other_ca = Ca::new("someone else");
    let files = Files::new();
    let client_ca = files.write("clients.pem", &ca.pem());
    let (icecache, _) =
        tls_icecache(&catalog(), &files, &ca, &["--tls-client-ca", &client_ca]).await;
    let url = format!("{}/v1/config", https(&icecache));

    let (cert, key) = ca.issue("spark", false);
    let allowed = client(&ca, Some((&cert, &key)))
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), 200);

    assert!(
        client(&ca, None).get(&url).send().await.is_err(),
        "no client certificate"
    );
    let (cert, key) = other_ca.issue("intruder", false);
    assert!(
        client(&ca, Some((&cert, &key)))
            .get(&url)
            .send()
            .await
            .is_err(),
        "a certificate from the wrong CA"
    );
}

#[tokio::test]
async fn a_certificate_rotated_on_disk_is_served_without_a_restart() {
    let ca = Ca::new("test ca");
    let files = Files::new();
    let (icecache, first) =
        tls_icecache(&catalog(), &files, &ca, &["--tls-reload-interval", "100ms"]).await;
    let url = format!("{}/v1/config", https(&icecache));
    let before = client(&ca, None).get(&url).send().await.unwrap();
    assert_eq!(peer_certificate(&before), der(&first));

    let (second, key) = ca.issue("icecache rotated", true);
    files.write("server.key", &key);
    files.write("server.pem", &second);
    crate::support::eventually("the rotated certificate served", || async {
        let response = client(&ca, None).get(&url).send().await.unwrap();
        peer_certificate(&response) == der(&second)
    })
    .await;
}

/// icecache (plain) → icecache (HTTPS, mTLS) → SeaweedFS.
async fn https_catalog(files: &Files, ca: &Ca) -> Icecache {
    let client_ca = files.write("upstream-clients.pem", &ca.pem());
    tls_icecache(&catalog(), files, ca, &["--tls-client-ca", &client_ca])
        .await
        .0
}

fn write_identity(files: &Files, ca: &Ca, name: &str) -> (String, String) {
    let (cert, key) = ca.issue(name, false);
    (
        files.write(&format!("{name}.pem"), &cert),
        files.write(&format!("{name}.key"), &key),
    )
}

/// icecache in front of an HTTPS catalog, trusting `ca` and presenting `cert` and `key`.
async fn front_of(
    catalog_tls: &Icecache,
    ca: &str,
    cert: &str,
    key: &str,
    extra: &[&str],
) -> Icecache {
    let mut flags = vec![
        "--upstream-ca",
        ca,
        "--upstream-client-cert",
        cert,
        "--upstream-client-key",
        key,
    ];
    flags.extend_from_slice(extra);
    Icecache::start(&https(catalog_tls), &flags).await
}

#[tokio::test]
async fn an_https_upstream_is_verified_with_the_given_ca_and_client_certificate() {
    let ca = Ca::new("catalog ca");
    let files = Files::new();
    let catalog_tls = https_catalog(&files, &ca).await;
    let ca_path = files.write("catalog-ca.pem", &ca.pem());
    let (cert, key) = write_identity(&files, &ca, "icecache-client");
    let front = front_of(&catalog_tls, &ca_path, &cert, &key, &[]).await;
    let response = reqwest::get(format!("{}/v1/config", front.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn an_https_upstream_with_an_unknown_ca_or_no_client_certificate_is_a_502() {
    let ca = Ca::new("catalog ca");
    let files = Files::new();
    let catalog_tls = https_catalog(&files, &ca).await;
    let wrong_ca = files.write("wrong-ca.pem", &Ca::new("not the catalog's").pem());
    let (cert, key) = write_identity(&files, &ca, "icecache-client");
    let untrusting = front_of(&catalog_tls, &wrong_ca, &cert, &key, &[]).await;
    let ca_path = files.write("catalog-ca.pem", &ca.pem());
    let anonymous = Icecache::start(&https(&catalog_tls), &["--upstream-ca", &ca_path]).await;
    for front in [&untrusting, &anonymous] {
        let response = reqwest::get(format!("{}/v1/config", front.url))
            .await
            .unwrap();
        assert_eq!(response.status(), 502);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], 502);
    }
}

#[test]
fn check_config_refuses_half_a_tls_setup_or_an_unreadable_certificate() {
    let files = Files::new();
    let cert = files.write("bad.pem", "not a certificate");
    for args in [
        vec!["--tls-cert", cert.as_str()],
        vec!["--tls-cert", cert.as_str(), "--tls-key", cert.as_str()],
        vec!["--tls-client-ca", cert.as_str()],
        vec!["--upstream-client-cert", cert.as_str()],
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_icecache"))
            .args(["--upstream", "https://catalog:8443"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(64), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("config key `"), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn a_client_certificate_for_the_upstream_rotated_on_disk_is_picked_up() {
    let ca = Ca::new("catalog ca");
    let files = Files::new();
    let catalog_tls = https_catalog(&files, &ca).await;
    let ca_path = files.write("catalog-ca.pem", &ca.pem());
    // First a certificate the catalog does not accept, then one it does.
    let (untrusted, untrusted_key) = Ca::new("retired ca").issue("icecache-client", false);
    let cert = files.write("client.pem", &untrusted);
    let key = files.write("client.key", &untrusted_key);
    let front = front_of(
        &catalog_tls,
        &ca_path,
        &cert,
        &key,
        &["--tls-reload-interval", "100ms"],
    )
    .await;
    let config = format!("{}/v1/config", front.url);
    assert_eq!(reqwest::get(&config).await.unwrap().status(), 502);
    let (trusted, trusted_key) = ca.issue("icecache-client", false);
    files.write("client.key", &trusted_key);
    files.write("client.pem", &trusted);
    crate::support::eventually("the rotated client certificate presented", || async {
        reqwest::get(&config).await.unwrap().status() == 200
    })
    .await;
}
