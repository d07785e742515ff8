//! The command line: defaults, `check-config`, and exit code 64 for a bad configuration.

use std::io::Write;
use std::process::{Command, Output};

fn icecache(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_icecache"))
        .args(args)
        .env_remove("ICECACHE_CONFIG")
        .env_remove("ICECACHE_UPSTREAM")
        .output()
        .expect("icecache runs")
}

fn config_file(text: &str) -> tempfile_path::TempPath {
    tempfile_path::write(text)
}

/// A config file that removes itself.
mod tempfile_path {
    use super::*;

    pub struct TempPath(pub std::path::PathBuf);

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    pub fn write(text: &str) -> TempPath {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "icecache-test-{}-{}.toml",
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .expect("config file written");
        TempPath(path)
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn check_config_accepts_a_valid_file_and_prints_the_effective_settings() {
    let file = config_file(
        "upstream = \"http://gravitino:9001/iceberg\"\nadmin_token = \"s3cret\"\n\
         [cache]\nfresh_for = \"2s\"\nmax_bytes = \"64MiB\"\n",
    );
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("upstream = http://gravitino:9001/iceberg"),
        "{stdout}"
    );
    assert!(stdout.contains("cache.fresh_for = 2s"), "{stdout}");
    assert!(stdout.contains("cache.max_bytes = 67108864"), "{stdout}");
    assert!(
        !stdout.contains("s3cret"),
        "the admin token must not be printed: {stdout}"
    );
}

#[test]
fn check_config_refuses_a_bad_value_with_exit_64_naming_the_key() {
    let file = config_file("upstream = \"http://a:1\"\n[cache]\nstale_if_error = \"often\"\n");
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    let err = stderr(&output);
    assert!(
        err.contains("cache.stale_if_error") && err.contains("5s"),
        "{err}"
    );
}

#[test]
fn check_config_refuses_an_unknown_key_with_exit_64() {
    let file = config_file("upstream = \"http://a:1\"\nfresh_for = \"5s\"\n");
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    assert!(stderr(&output).contains("fresh_for"), "{}", stderr(&output));
}

#[test]
fn check_config_refuses_strip_keys_that_name_a_header_framing_the_answer() {
    for pattern in [
        "content-encoding",
        "Content-Type",
        "content-*",
        "*-length",
        "date",
    ] {
        let file = config_file(&format!(
            "upstream = \"http://a:1\"\nstrip_keys = [\"x-secret\", \"{pattern}\"]\n"
        ));
        let output = icecache(&["check-config", file.0.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(64), "{pattern}");
        let err = stderr(&output);
        assert!(
            err.contains("strip_keys") && err.contains("frames or labels"),
            "{pattern}: {err}"
        );
    }
    // Credential headers, and icecache's own marks, may be named.
    let file = config_file(
        "upstream = \"http://a:1\"\nstrip_keys = [\"x-secret\", \"x-cache\", \"etag\"]\n",
    );
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn check_config_refuses_a_malformed_upstream() {
    for upstream in [
        "not a url",
        "ftp://catalog",
        "http://catalog:8181/iceberg?x=1",
    ] {
        let file = config_file(&format!("upstream = \"{upstream}\"\n"));
        let output = icecache(&["check-config", file.0.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(64), "{upstream}");
        assert!(
            stderr(&output).contains("`upstream`"),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn check_config_of_a_missing_file_exits_64() {
    let output = icecache(&["check-config", "/nonexistent/icecache.toml"]);
    assert_eq!(output.status.code(), Some(64));
    assert!(stderr(&output).contains("/nonexistent/icecache.toml"));
}

#[test]
fn running_without_an_upstream_exits_64_before_binding() {
    let output = icecache(&["--listen", "127.0.0.1:1"]);
    assert_eq!(output.status.code(), Some(64));
    assert!(
        stderr(&output).contains("--upstream"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_bad_flag_value_exits_64() {
    let output = icecache(&["--upstream", "http://a:1", "--listen", "nowhere"]);
    assert_eq!(output.status.code(), Some(64));
    assert!(stderr(&output).contains("`listen`"), "{}", stderr(&output));
}

#[test]
fn environment_variables_set_keys() {
    let file = config_file("upstream = \"http://a:1\"\n");
    let output = Command::new(env!("CARGO_BIN_EXE_icecache"))
        .args(["check-config", file.0.to_str().unwrap()])
        .env("ICECACHE_FRESH_FOR", "7s")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("cache.fresh_for = 7s"));
}

#[test]
fn help_explains_every_option() {
    let output = icecache(&["--help"]);
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--upstream",
        "--listen",
        "--admin-listen",
        "--config",
        "--log-format",
        "--connect-timeout",
        "--request-timeout",
        "--header-read-timeout",
        "--max-header-bytes",
        "--max-connections",
        "--shutdown-grace",
        "--namespace-separator",
        "--admin-token",
        "--public-url",
        "--workers",
        "--cache-gzip",
        "--identity",
        "--credentials",
        "--auth-headers",
        "--authz-ttl",
        "--strip-keys",
        "--cache-enabled",
        "--cache-max-bytes",
        "--cache-max-entry-bytes",
        "--fresh-for",
        "--stale-while-revalidate",
        "--stale-if-error",
        "check-config",
    ] {
        assert!(help.contains(flag), "--help does not mention {flag}");
    }
}

#[test]
fn the_shipped_example_config_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/icecache.toml");
    let output = icecache(&["check-config", example]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn check_config_refuses_a_shared_body_with_passed_through_credentials() {
    for identity in ["revalidate", "shared"] {
        let file = config_file(&format!(
            "upstream = \"http://a:1\"\nidentity = \"{identity}\"\ncredentials = \"passthrough\"\n"
        ));
        let output = icecache(&["check-config", file.0.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(64), "{identity}");
        assert!(stderr(&output).contains("unsafe"), "{}", stderr(&output));
    }
}

#[test]
fn check_config_refuses_an_unsafe_prefix_override() {
    let file = config_file(
        "upstream = \"http://a:1\"\ncredentials = \"strip\"\n\
         [prefixes.wh]\nidentity = \"shared\"\ncredentials = \"passthrough\"\n",
    );
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    assert!(
        stderr(&output).contains("prefixes.wh"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn check_config_prints_the_effective_policy_per_prefix() {
    let file = config_file(
        "upstream = \"http://a:1\"\n[prefixes.wh]\nidentity = \"revalidate\"\ncredentials = \"strip\"\n",
    );
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("policy (default) = identity = per-principal, credentials = passthrough"),
        "{stdout}"
    );
    assert!(
        stdout.contains("policy (prefix wh) = identity = revalidate, credentials = strip"),
        "{stdout}"
    );
}

#[test]
fn check_config_refuses_a_secret_injected_as_a_literal_value() {
    let file = config_file(
        "upstream = \"http://a:1\"\ncredentials = \"inject\"\n\
         [inject]\n\"s3.secret-access-key\" = { value = \"oops\" }\n",
    );
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    assert!(stderr(&output).contains("env"), "{}", stderr(&output));
}

#[test]
fn json_logs_are_one_object_per_line_with_the_request_fields() {
    use std::io::{BufRead, BufReader, Read};
    let dead = crate::support::ports::nothing_listens();
    let mut child = Command::new(env!("CARGO_BIN_EXE_icecache"))
        .args(["--upstream", &dead])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--log-format", "json"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first line says where it listens; read the rest after it has stopped.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let started: serde_json::Value =
        serde_json::from_str(&first).unwrap_or_else(|_| panic!("not JSON: {first}"));
    assert_eq!(started["message"], "icecache started", "{first}");
    let listen = started["listen"].as_str().unwrap().to_owned();
    let mut stream = std::net::TcpStream::connect(&listen).unwrap();
    stream
        .write_all(b"GET /v1/config HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    child.wait().unwrap();
    let logs = first + &rest;
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["route"] == "config" && l["status"] == 502 && l["method"] == "GET"),
        "no request line in {logs}"
    );
}

#[test]
fn every_problem_of_a_config_file_is_reported_at_once_each_naming_its_key() {
    let file = config_file(
        "upstream = \"http://a:1\"\nlog_format = \"xml\"\ncache_max = 1\n\
         credentials = \"inject\"\n[cache]\ngzipp = true\n",
    );
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    let err = stderr(&output);
    for key in ["`log_format`", "`cache_max`", "`cache.gzipp`"] {
        assert!(err.contains(key), "{key} missing from: {err}");
    }
    let file = config_file(
        "upstream = \"http://a:1\"\ncredentials = \"inject\"\n[inject]\n\
         \"s3.secret-access-key\" = { value = \"x\" }\n\"S3.Session-Token\" = { value = \"y\" }\n\
         \"s3.access-key-id\" = { env = \"ICECACHE_TEST_NEVER_SET\" }\n",
    );
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    let err = stderr(&output);
    assert_eq!(err.matches("config key `inject`").count(), 3, "{err}");
}

#[test]
fn a_redis_url_without_a_cluster_key_exits_64_naming_the_key() {
    let output = icecache(&[
        "--upstream",
        "http://a:1",
        "--redis-url",
        "redis://127.0.0.1:1",
    ]);
    assert_eq!(output.status.code(), Some(64));
    assert!(
        stderr(&output).contains("cluster.key_file"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_short_or_missing_cluster_key_and_a_bad_redis_url_are_reported_together() {
    let short = config_file("sixteen bytes...");
    let file = config_file(&format!(
        "upstream = \"http://a:1\"\n[cluster]\nredis_url = \"http://user:hunter2@redis:6379\"\n\
         key_file = \"{}\"\nconsistency = \"eventual\"\nlease = \"0s\"\n",
        short.0.display()
    ));
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    let err = stderr(&output);
    for key in [
        "cluster.redis_url",
        "cluster.key_file",
        "cluster.consistency",
        "cluster.lease",
    ] {
        assert!(err.contains(key), "{key} missing from: {err}");
    }
    assert!(
        !err.contains("hunter2"),
        "a Redis password in an error: {err}"
    );
    let missing = icecache(&[
        "--upstream",
        "http://a:1",
        "--redis-url",
        "redis://127.0.0.1:1",
        "--cluster-key-file",
        "/nonexistent/icecache-key",
    ]);
    assert_eq!(missing.status.code(), Some(64));
    assert!(stderr(&missing).contains("cluster.key_file"));
}

#[test]
fn check_config_shows_the_cluster_without_its_password_or_key() {
    let key = config_file("0123456789abcdef0123456789abcdef");
    let file = config_file(&format!(
        "upstream = \"http://a:1\"\n[cluster]\nredis_url = \"rediss://icecache:hunter2@redis:6380\"\n\
         key_file = \"{}\"\nconsistency = \"bounded\"\n",
        key.0.display()
    ));
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("cluster.consistency = bounded"), "{stdout}");
    assert!(stdout.contains("rediss://…@redis:6380"), "{stdout}");
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("0123456789abcdef"),
        "{stdout}"
    );
}

#[test]
fn a_redis_url_that_is_not_tcp_is_refused_without_showing_its_password() {
    let key = config_file("0123456789abcdef0123456789abcdef");
    for url in [
        "redis+unix:///run/redis.sock?pass=hunter2",
        "unix:///run/redis.sock?user=u&pass=hunter2",
        "redis://u:hunter2@127.0.0.1:6379/0#hunter2",
    ] {
        let file = config_file(&format!(
            "upstream = \"http://a:1\"\n[cluster]\nredis_url = \"{url}\"\nkey_file = \"{}\"\n",
            key.0.display()
        ));
        let output = icecache(&["check-config", file.0.to_str().unwrap()]);
        let shown = format!(
            "{}{}",
            stderr(&output),
            String::from_utf8_lossy(&output.stdout)
        );
        assert!(!shown.contains("hunter2"), "{url}: {shown}");
        if url.starts_with("redis://") {
            assert_eq!(output.status.code(), Some(0), "{url}: {shown}");
        } else {
            assert_eq!(output.status.code(), Some(64), "{url}: {shown}");
            assert!(shown.contains("cluster.redis_url"), "{url}: {shown}");
        }
    }
}

#[test]
fn cluster_durations_beyond_their_bounds_and_a_glob_prefix_are_refused() {
    let key = config_file("0123456789abcdef0123456789abcdef");
    let file = config_file(&format!(
        "upstream = \"http://a:1\"\n[cluster]\nredis_url = \"redis://127.0.0.1:6379\"\n\
         key_file = \"{}\"\nlease = \"18446744073709551615ms\"\nmember_timeout = \"99999999999999s\"\n\
         barrier_interval = \"99999999999s\"\nredis_timeout = \"2h\"\nkey_prefix = \"a*b\"\n",
        key.0.display()
    ));
    let output = icecache(&["check-config", file.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    let err = stderr(&output);
    for key in [
        "cluster.lease",
        "cluster.member_timeout",
        "cluster.barrier_interval",
        "cluster.redis_timeout",
        "cluster.key_prefix",
    ] {
        assert!(err.contains(key), "{key} missing from: {err}");
    }
}

#[test]
fn a_cluster_setting_without_a_redis_url_is_refused() {
    let key = config_file("0123456789abcdef0123456789abcdef");
    let key_path = key.0.to_str().unwrap().to_owned();
    for (flag, value, named) in [
        ("--cluster-key-file", key_path.as_str(), "cluster.key_file"),
        (
            "--cluster-consistency",
            "read-your-writes",
            "cluster.consistency",
        ),
        ("--cluster-lease", "10s", "cluster.lease"),
        ("--cluster-key-prefix", "foo", "cluster.key_prefix"),
    ] {
        let output = icecache(&["--upstream", "http://a:1", flag, value]);
        assert_eq!(output.status.code(), Some(64), "{flag}");
        let err = stderr(&output);
        assert!(
            err.contains(named) && err.contains("cluster.redis_url"),
            "{flag}: {err}"
        );
    }
}

#[test]
fn every_earlier_name_of_the_consistency_starts_the_one_mode_and_others_are_refused() {
    let key = config_file("0123456789abcdef0123456789abcdef");
    let file = |word: &str| {
        config_file(&format!(
            "upstream = \"http://a:1\"\n[cluster]\nredis_url = \"redis://127.0.0.1:6379\"\n\
             key_file = \"{}\"\nconsistency = \"{word}\"\n",
            key.0.display()
        ))
    };
    for word in ["read-your-writes", "leases", "bounded"] {
        let config = file(word);
        let output = icecache(&["check-config", config.0.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(0), "{word}: {}", stderr(&output));
    }
    let config = file("eventual");
    let output = icecache(&["check-config", config.0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(64));
    assert!(stderr(&output).contains("cluster.consistency"));
}
