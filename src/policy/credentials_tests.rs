//! The credential reader and the strip, against bodies as catalogs send them.

use super::*;

fn inspect_default(body: &[u8]) -> Result<Vended, Unreadable> {
    inspect(body, &KeyPatterns::default())
}

#[test]
fn a_body_without_credentials_vends_nothing() {
    let v =
        inspect_default(br#"{"metadata":{"a":1},"config":{"s3.endpoint":"http://x"}}"#).unwrap();
    assert_eq!(v, Vended::default());
    assert_eq!(v.servable_for(Duration::from_secs(5)), None);
}

#[test]
fn the_earliest_expiry_across_config_and_storage_credentials_wins() {
    let v = inspect_default(
        br#"{"metadata":{},"config":{"s3.access-key-id":"A","s3.session-token-expires-at-ms":"9000"},
            "storage-credentials":[{"prefix":"s3://b","config":{"adls.sas-token-expires-at-ms.acct":"5000"}}]}"#,
    )
    .unwrap();
    assert!(v.has_secrets);
    assert_eq!(v.earliest_expiry_ms, Some(5000));
}

#[test]
fn an_expired_credential_is_servable_for_no_time() {
    let v = inspect_default(
        br#"{"metadata":{},"config":{"token":"t","gcs.oauth2.token-expires-at":"1"}}"#,
    )
    .unwrap();
    assert_eq!(v.servable_for(Duration::from_secs(5)), Some(Duration::ZERO));
}

#[test]
fn an_unparsable_expiry_counts_as_expired() {
    let v =
        inspect_default(br#"{"metadata":{},"config":{"s3.session-token-expires-at-ms":"soon"}}"#)
            .unwrap();
    assert_eq!(v.earliest_expiry_ms, Some(0));
}

#[test]
fn margin_is_half_the_remaining_lifetime_at_most_five_minutes() {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let short = Vended {
        has_secrets: true,
        earliest_expiry_ms: Some(now_ms + 2_000),
        ..Vended::default()
    };
    let servable = short.servable_for(Duration::from_secs(5)).unwrap();
    assert!(servable <= Duration::from_millis(1_000) && servable > Duration::from_millis(900));
    let long = Vended {
        has_secrets: true,
        earliest_expiry_ms: Some(now_ms + 3_600_000),
        ..Vended::default()
    };
    let servable = long.servable_for(Duration::from_secs(5)).unwrap();
    assert!(servable > Duration::from_secs(3_290) && servable <= Duration::from_secs(3_300));
}

#[test]
fn a_secret_without_expiry_is_capped() {
    let v = inspect_default(br#"{"metadata":{},"config":{"s3.secret-access-key":"S"}}"#).unwrap();
    assert_eq!(
        v.servable_for(Duration::from_secs(5)),
        Some(Duration::from_secs(5))
    );
}

const VENDED: &[u8] = br#"{"metadata-location":"s3://b/m.json","metadata":{"format-version":2,"n":12345678901234567},
    "config":{"s3.access-key-id":"AK","s3.secret-access-key":"SK","s3.session-token":"ST",
              "s3.session-token-expires-at-ms":"1","s3.endpoint":"http://s3","client.region":"eu"},
    "storage-credentials":[{"prefix":"s3://b/a","config":{"s3.access-key-id":"AK2"}},
                           {"prefix":"s3://b/c","config":{"s3.secret-access-key":"SK3","s3.signer.uri":"http://sign"}}]}"#;

#[test]
fn strip_removes_every_secret_and_keeps_the_rest() {
    let stripped = strip(VENDED, &KeyPatterns::default(), Layout::ConfigFirst, &[]).unwrap();
    let text = std::str::from_utf8(&stripped.body).unwrap();
    for secret in ["AK", "SK", "ST", "expires-at"] {
        assert!(!text.contains(secret), "{secret} left in {text}");
    }
    let value: Value = serde_json::from_slice(&stripped.body).unwrap();
    assert_eq!(value["config"]["s3.endpoint"], "http://s3");
    assert_eq!(value["config"]["client.region"], "eu");
    assert_eq!(value["metadata"]["n"], 12345678901234567u64);
    assert_eq!(value["metadata-location"], "s3://b/m.json");
    let storage = value["storage-credentials"].as_array().unwrap();
    assert_eq!(storage.len(), 1, "the entry left empty is dropped");
    assert_eq!(storage[0]["config"]["s3.signer.uri"], "http://sign");
    assert_eq!(stripped.removed, 6);
    assert!(!stripped.vended.has_secrets);
}

#[test]
fn a_secret_named_at_the_top_level_is_stripped_in_every_layout() {
    let body = br#"{"metadata":{},"s3.secret-access-key":"SK","S3.Session-Token":"ST","token":"T","config":{},"metadata-location":"m"}"#;
    for layout in [Layout::ConfigFirst, Layout::AsIs] {
        let stripped = strip(body, &KeyPatterns::default(), layout, &[]).unwrap();
        let text = std::str::from_utf8(&stripped.body).unwrap();
        for secret in ["SK", "ST", "\"T\""] {
            assert!(
                !text.contains(secret),
                "{secret} left in {text} ({layout:?})"
            );
        }
        assert_eq!(stripped.removed, 3, "{layout:?}");
        let value: Value = serde_json::from_slice(&stripped.body).unwrap();
        assert_eq!(value["metadata-location"], "m");
    }
}

#[test]
fn a_secret_named_at_the_top_level_counts_as_vended() {
    let v = inspect_default(br#"{"metadata":{},"config":{},"s3.session-token":"ST"}"#).unwrap();
    assert!(v.has_secrets);
    let v = inspect_default(br#"{"metadata":{},"config":{},"metadata-location":"m"}"#).unwrap();
    assert!(!v.has_secrets);
}

#[test]
fn storage_credentials_left_empty_disappear() {
    let body =
        br#"{"metadata":{},"storage-credentials":[{"prefix":"s3://b","config":{"token":"t"}}]}"#;
    let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst, &[]).unwrap();
    assert_eq!(&stripped.body[..], br#"{"config":{},"metadata":{}}"#);
    assert!(stripped.config_empty);
}

#[test]
fn an_injected_fragment_makes_valid_json_with_or_without_other_config() {
    let fragment = Bytes::from_static(br#""s3.access-key-id":"INJ""#);
    for body in [
        &br#"{"metadata":{}}"#[..],
        br#"{"metadata":{},"config":{"a":"b"}}"#,
    ] {
        let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst, &[]).unwrap();
        let parts = spliced(&stripped.body, &fragment, stripped.config_empty);
        let served = parts.concat();
        let value: Value = serde_json::from_slice(&served).unwrap();
        assert_eq!(value["config"]["s3.access-key-id"], "INJ");
        assert!(
            !stripped.body.windows(3).any(|w| w == b"INJ"),
            "the stored body holds no injected value"
        );
    }
}

#[test]
fn nulls_where_objects_belong_are_read_as_empty() {
    let body = br#"{"metadata":{},"config":null,"storage-credentials":null}"#;
    let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst, &[]).unwrap();
    assert_eq!(&stripped.body[..], br#"{"config":{},"metadata":{}}"#);
    let body =
        br#"{"metadata":{},"config":{"s3.secret-access-key":"S"},"storage-credentials":null}"#;
    let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst, &[]).unwrap();
    assert_eq!(stripped.removed, 1);
    assert!(inspect_default(body).unwrap().has_secrets);
}

#[test]
fn credentials_answers_keep_their_shape() {
    let body =
        br#"{"storage-credentials":[{"prefix":"s3://b","config":{"s3.access-key-id":"A"}}]}"#;
    let stripped = strip(body, &KeyPatterns::default(), Layout::AsIs, &[]).unwrap();
    assert_eq!(&stripped.body[..], br#"{"storage-credentials":[]}"#);
}

#[test]
fn a_repeated_member_is_written_once_with_its_last_value() {
    let body = br#"{"config":{"s3.secret-access-key":"S"},"config":{"a":"b"},"metadata":{}}"#;
    let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst, &[]).unwrap();
    assert_eq!(&stripped.body[..], br#"{"config":{"a":"b"},"metadata":{}}"#);
}

#[test]
fn members_spelled_in_another_case_are_stripped_too() {
    let body = br#"{"metadata":{},"Config":{"s3.secret-access-key":"S","s3.endpoint":"e"},"STORAGE-CREDENTIALS":[{"prefix":"p","CONFIG":{"token":"t"}}]}"#;
    let stripped = strip(body, &KeyPatterns::default(), Layout::ConfigFirst, &[]).unwrap();
    assert_eq!(
        &stripped.body[..],
        br#"{"config":{"s3.endpoint":"e"},"metadata":{}}"#
    );
    let vended = inspect_default(body).unwrap();
    assert!(
        vended.has_secrets,
        "passthrough reads the variants as a Go client would"
    );
}

#[test]
fn secrets_go_from_every_member_at_any_depth_and_the_metadata_stays_as_written() {
    let body = br#"{"metadata":{"format-version":2,"n":1.50,"properties":{"token":"T","keep":"k"},"schemas":[{"fields":[{"S3.Secret-Access-Key":"S","id":1}]}]},"config":{},"x":{"a":[{"b":{"c":{"s3.session-token":"ST"}}}]}}"#;
    for layout in [Layout::ConfigFirst, Layout::AsIs] {
        let stripped = strip(body, &KeyPatterns::default(), layout, &[]).unwrap();
        assert_eq!(
            &stripped.body[..],
            &br#"{"config":{},"metadata":{"format-version":2,"n":1.50,"properties":{"keep":"k"},"schemas":[{"fields":[{"id":1}]}]},"x":{"a":[{"b":{"c":{}}}]}}"#[..],
            "{layout:?}"
        );
        assert_eq!(stripped.removed, 3, "{layout:?}");
    }
}

#[test]
fn a_secret_anywhere_counts_as_vended() {
    let v = inspect_default(
        br#"{"metadata":{"properties":{"a":[{"b":{"gcs.oauth2.token":"t"}}]}},"config":{}}"#,
    )
    .unwrap();
    assert!(v.has_secrets);
    let configured = KeyPatterns::new(["my.secret"]);
    let v = inspect(br#"{"metadata":{"x":{"My.Secret":"t"}}}"#, &configured).unwrap();
    assert!(v.has_secrets, "the configured strip keys count too");
}

#[test]
fn prefixes_are_read_in_every_spelling() {
    let body = br#"{"Storage-Credentials":[{"PREFIX":"s3://a","config":{}},{"prefix":"s3://b"}],"storage-credentials":null}"#;
    assert_eq!(vended_prefixes(body), ["s3://a", "s3://b"]);
}

#[test]
fn non_json_is_an_error() {
    assert!(inspect_default(b"<html>").is_err());
    assert!(inspect_default(b"[1,2]").is_err());
    assert!(strip(b"[1,2]", &KeyPatterns::default(), Layout::AsIs, &[]).is_err());
    assert!(strip(b"<html>", &KeyPatterns::default(), Layout::AsIs, &[]).is_err());
}

#[test]
fn every_expiry_spelling_counts_in_any_case() {
    for key in [
        "expiration-time",
        "S3.Session-Token-Expires-At-Ms",
        "adls.sas-token-expires-at-ms",
        "ADLS.SAS-TOKEN-EXPIRES-AT-MS.acct",
    ] {
        let body =
            format!(r#"{{"metadata":{{}},"config":{{"s3.session-token":"t","{key}":"7000"}}}}"#);
        let v = inspect_default(body.as_bytes()).unwrap();
        assert_eq!(v.earliest_expiry_ms, Some(7000), "{key}");
    }
}
