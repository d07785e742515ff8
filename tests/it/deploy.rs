//! Every file in deploy/ passes the checks its own tools make, and names only what icecache
//! really exports and accepts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::cluster::{Redis, Tier};
use crate::support::{ports, Icecache};
use serde_json::Value;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(deploy(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn run(command: &mut Command) -> std::process::Output {
    let output = command
        .output()
        .expect("the tool runs (scripts/test.sh installs it)");
    assert!(
        output.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The metric names icecache exports (from `# HELP` lines of a live /metrics), after a read
/// and a write have gone through (vectors appear with their first labelled sample).
/// A replica of a tier (on a real redis-server) is asked too, for the cluster's series.
async fn exported_metrics() -> BTreeSet<String> {
    let upstream = ports::nothing_listens();
    let single = Icecache::start(&upstream, &[]).await;
    let redis = Redis::start().await;
    let tier = Tier::start(1, &upstream, &redis, &[]).await;
    // Both event sources configured (neither reachable: they stay degraded).
    let token = crate::support::events::token_file("t");
    let nats = format!("nats://127.0.0.1:{}", ports::reserved());
    let events = Icecache::start(
        &upstream,
        &[
            "--events-seaweedfs-token-file",
            token.path(),
            "--events-nats-url",
            &nats,
            "--events-nats-subject",
            "lakekeeper",
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let mut names = BTreeSet::new();
    for icecache in [&single, &tier.replicas[0], &events] {
        let table = format!("{}/v1/namespaces/db/tables/t", icecache.url);
        client.get(&table).send().await.unwrap();
        client.delete(&table).send().await.unwrap();
        names.extend(
            icecache
                .metrics()
                .await
                .lines()
                .filter_map(|l| l.strip_prefix("# HELP "))
                .filter_map(|l| l.split_whitespace().next())
                .map(str::to_owned),
        );
    }
    names
}

/// `icecache_…` names in a text, without histogram suffixes.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in text.match_indices("icecache_") {
        if i > 0 && text.as_bytes()[i - 1] == b':' {
            continue;
        }
        let name: String = text[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name)
            .to_owned();
        names.insert(base);
    }
    names
}

#[test]
fn prometheus_rules_pass_promtool() {
    run(Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(deploy("prometheus/rules.yml")));
}

#[tokio::test]
async fn rules_and_dashboard_use_only_exported_metrics_and_defined_recordings() {
    let exported = exported_metrics().await;
    let rules = read("prometheus/rules.yml");
    let dashboard = read("grafana/icecache.json");
    for (file, text) in [("rules.yml", &rules), ("icecache.json", &dashboard)] {
        for name in metric_names(text) {
            assert!(
                exported.contains(&name),
                "{file} uses {name}, which icecache does not export"
            );
        }
    }
    let recorded: BTreeSet<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record: "))
        .collect();
    for (i, _) in dashboard.match_indices("icecache:") {
        let name: String = dashboard[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        assert!(
            recorded.contains(name.as_str()),
            "the dashboard uses {name}, which no rule records"
        );
    }
}

#[test]
fn the_grafana_dashboard_is_valid_json_with_panels() {
    let dashboard: Value = serde_json::from_str(&read("grafana/icecache.json")).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 6);
    assert!(panels
        .iter()
        .all(|p| p["targets"].as_array().is_some_and(|t| !t.is_empty())));
}

#[test]
fn the_systemd_unit_verifies_and_is_sandboxed() {
    let unit = read("systemd/icecache.service");
    for setting in [
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(setting), "the unit lacks {setting}");
    }
    // systemd-analyze checks that ExecStart exists: point it at the binary under test.
    let dir = std::env::temp_dir().join(crate::support::unique("icecache-unit"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("icecache.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/icecache", env!("CARGO_BIN_EXE_icecache")),
    )
    .unwrap();
    run(Command::new("systemd-analyze").arg("verify").arg(&path));
    let _ = std::fs::remove_dir_all(dir);
}

/// The Kubernetes documents, as JSON, parsed by PyYAML from the test environment.
fn kubernetes(file: &str) -> Vec<Value> {
    let output = run(Command::new(crate::support::python()).args([
        "-c",
        "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        deploy(file).to_str().unwrap(),
    ]));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn probes(container: &Value) -> (String, String) {
    (
        container["livenessProbe"]["httpGet"]["path"]
            .as_str()
            .unwrap()
            .to_owned(),
        container["readinessProbe"]["httpGet"]["path"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

#[test]
fn the_edge_deployment_has_every_piece_and_probes_health_and_readiness() {
    let documents = kubernetes("kubernetes/edge.yaml");
    let kinds: BTreeSet<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    for kind in [
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "ServiceMonitor",
    ] {
        assert!(kinds.contains(kind), "edge.yaml has no {kind}");
    }
    let deployment = documents
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        probes(container),
        ("/healthz".to_owned(), "/readyz".to_owned())
    );
    assert!(container["resources"]["requests"]["memory"].is_string());
}

#[test]
fn the_edge_configmap_holds_a_config_icecache_accepts() {
    let documents = kubernetes("kubernetes/edge.yaml");
    let config_map = documents.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let toml = config_map["data"]["icecache.toml"].as_str().unwrap();
    let dir = std::env::temp_dir().join(crate::support::unique("icecache-edge"));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("s3-secret-access-key");
    std::fs::write(&secret, "secret").unwrap();
    let cluster_key = dir.join("key");
    std::fs::write(&cluster_key, [7u8; 32]).unwrap();
    let config = dir.join("icecache.toml");
    std::fs::write(
        &config,
        toml.replace(
            "/var/run/icecache/s3-secret-access-key",
            secret.to_str().unwrap(),
        )
        .replace(
            "/var/run/icecache-cluster/key",
            cluster_key.to_str().unwrap(),
        ),
    )
    .unwrap();
    let check = |redis_url: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_icecache"));
        command
            .args(["check-config", config.to_str().unwrap()])
            .env("READER_S3_ACCESS_KEY_ID", "key")
            .env("ICECACHE_ADMIN_TOKEN", "from-the-secret")
            .env_remove("ICECACHE_REDIS_URL");
        if let Some(url) = redis_url {
            command.env("ICECACHE_REDIS_URL", url);
        }
        command.output().expect("icecache runs")
    };
    let output = check(Some("rediss://icecache:pw@redis.lake.svc:6380"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("identity = revalidate, credentials = inject"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cluster.consistency = read-your-writes"),
        "{stdout}"
    );
    assert!(!stdout.contains("pw@"), "{stdout}");
    // The Secret's URL is what makes it a tier; a bad one is refused before anything binds.
    let bad = check(Some("http://redis.lake.svc:6380"));
    assert_eq!(bad.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cluster.redis_url"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_edge_tier_takes_its_redis_url_and_cluster_key_from_secrets() {
    let edge = kubernetes("kubernetes/edge.yaml");
    let deployment = edge.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() > 1);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let url = env_of(container, "ICECACHE_REDIS_URL").expect("the edge replicas share a Redis");
    let secret_name = url["valueFrom"]["secretKeyRef"]["name"]
        .as_str()
        .expect("from a Secret");
    let secret = edge
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == secret_name)
        .expect("the Redis Secret is in the file");
    assert!(secret["stringData"]["url"]
        .as_str()
        .unwrap()
        .starts_with("rediss://"));
    // The key file named in the config is a mounted Secret, not part of the image or config.
    let toml = edge.iter().find(|d| d["kind"] == "ConfigMap").unwrap()["data"]["icecache.toml"]
        .as_str()
        .unwrap()
        .to_owned();
    let key_file = toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("key_file = "))
        .expect("cluster.key_file")
        .trim_matches('"')
        .to_owned();
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| key_file.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("the key file is mounted");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    let key_secret = volume["secret"]["secretName"]
        .as_str()
        .expect("mounted from a Secret");
    assert!(edge
        .iter()
        .any(|d| d["kind"] == "Secret" && d["metadata"]["name"] == key_secret));
}

/// The value an env entry of a container gets: its literal, or the Secret key it is taken from.
fn env_of<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// An admin port reachable from the pod network carries a token, taken from a Secret.
fn assert_admin_is_loopback_or_guarded(container: &Value, file: &str) {
    let listen = env_of(container, "ICECACHE_ADMIN_LISTEN")
        .and_then(|e| e["value"].as_str())
        .unwrap_or("127.0.0.1:9181");
    if listen.starts_with("127.") {
        return;
    }
    let token = env_of(container, "ICECACHE_ADMIN_TOKEN")
        .unwrap_or_else(|| panic!("{file}: admin on {listen} without ICECACHE_ADMIN_TOKEN"));
    assert!(
        token["valueFrom"]["secretKeyRef"]["key"].is_string(),
        "{file}: the admin token must come from a Secret, not a literal: {token}"
    );
}

#[test]
fn every_admin_port_off_loopback_takes_its_token_from_a_secret() {
    let edge = kubernetes("kubernetes/edge.yaml");
    let deployment = edge.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let config = edge.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    assert!(config["data"]["icecache.toml"]
        .as_str()
        .unwrap()
        .contains("admin_listen = \"0.0.0.0:9181\""));
    let token = env_of(container, "ICECACHE_ADMIN_TOKEN").expect("edge admin token");
    assert!(token["valueFrom"]["secretKeyRef"]["key"].is_string());
    let sidecar = kubernetes("kubernetes/sidecar.yaml");
    let pod = sidecar.iter().find(|d| d["kind"] == "Pod").unwrap();
    let icecache = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "icecache")
        .unwrap();
    assert_admin_is_loopback_or_guarded(icecache, "sidecar.yaml");
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.contains("ICECACHE_ADMIN_LISTEN=127.0.0.1:9181"),
        "the image keeps admin on loopback unless told otherwise"
    );
}

#[test]
fn the_sidecar_points_its_executor_at_loopback_and_probes_icecache() {
    let documents = kubernetes("kubernetes/sidecar.yaml");
    let pod = documents.iter().find(|d| d["kind"] == "Pod").unwrap();
    let containers = pod["spec"]["containers"].as_array().unwrap();
    let executor = containers
        .iter()
        .find(|c| c["name"] == "spark-executor")
        .unwrap();
    assert!(executor["args"].as_array().unwrap().iter().any(|a| a
        .as_str()
        .is_some_and(|a| a.ends_with("uri=http://127.0.0.1:8181"))));
    let icecache = containers.iter().find(|c| c["name"] == "icecache").unwrap();
    assert_eq!(
        probes(icecache),
        ("/healthz".to_owned(), "/readyz".to_owned())
    );
}

#[test]
fn the_dockerfile_is_multi_stage_non_root_and_checks_health_with_the_binary() {
    let dockerfile = read("Dockerfile");
    assert_eq!(
        dockerfile
            .lines()
            .filter(|l| l.starts_with("FROM "))
            .count(),
        2
    );
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(!user.starts_with("root") && !user.starts_with('0'));
    assert!(dockerfile.contains("\"probe\", \"http://127.0.0.1:9181/healthz\""));
}

#[tokio::test]
async fn the_probe_command_passes_on_a_healthy_admin_port_and_fails_otherwise() {
    let icecache = Icecache::start(&ports::nothing_listens(), &[]).await;
    let probe = |url: String| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_icecache"))
                .args(["probe", &url])
                .output()
                .unwrap()
                .status
        })
    };
    assert!(probe(format!("{}/healthz", icecache.admin))
        .await
        .unwrap()
        .success());
    assert!(!probe(format!("{}/readyz", icecache.admin))
        .await
        .unwrap()
        .success());
    assert!(!probe(format!("{}/healthz", ports::nothing_listens()))
        .await
        .unwrap()
        .success());
}
