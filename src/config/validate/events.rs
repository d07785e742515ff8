//! The `[events]` table into `EventsSettings`.

use super::Problems;
use crate::config::{RawEvents, Secret};
use crate::events::settings::{
    default_nats_consumer, EventsSettings, NatsSettings, DEFAULT_PREFIX_TEMPLATE,
};

pub(super) fn settings(raw: &RawEvents, p: &mut Problems) -> EventsSettings {
    let fresh_for = raw
        .fresh_for
        .as_deref()
        .map(|text| p.duration("events.fresh_for", Some(text), Default::default()));
    let seaweedfs_token =
        raw.seaweedfs_token_file
            .as_ref()
            .and_then(|path| match std::fs::read_to_string(path) {
                Ok(text) if !text.trim().is_empty() => Some(Secret::new(text.trim().to_owned())),
                Ok(_) => {
                    p.add(
                        "events.seaweedfs_token_file",
                        format!(
                        "{} is empty: put the bearer_token of SeaweedFS's notification.toml in it",
                        path.display()
                    ),
                    );
                    None
                }
                Err(e) => {
                    p.add(
                        "events.seaweedfs_token_file",
                        format!("cannot read {}: {e}", path.display()),
                    );
                    None
                }
            });
    let nats = nats(raw, p);
    let settings = EventsSettings {
        fresh_for,
        seaweedfs_token,
        nats,
    };
    if fresh_for.is_some() && !settings.any_source() {
        p.add(
            "events.fresh_for",
            "is set but no event source is (events.seaweedfs_token_file or events.nats_url): \
             without events an entry cannot be kept fresh that long safely",
        );
    }
    settings
}

fn nats(raw: &RawEvents, p: &mut Problems) -> Option<NatsSettings> {
    let Some(url) = raw.nats_url.as_deref().filter(|u| !u.is_empty()) else {
        for (key, set) in [
            ("events.nats_subject", raw.nats_subject.is_some()),
            ("events.nats_stream", raw.nats_stream.is_some()),
            ("events.nats_consumer", raw.nats_consumer.is_some()),
            ("events.prefix_template", raw.prefix_template.is_some()),
        ] {
            if set {
                p.add(key, "is set but events.nats_url is not");
            }
        }
        return None;
    };
    if !(url.starts_with("nats://") || url.starts_with("tls://")) {
        p.add(
            "events.nats_url",
            "use nats://host:4222 (or tls://host:4222)",
        );
    }
    let word = |c: char| c.is_ascii_alphanumeric() || "_-".contains(c);
    let subject = raw.nats_subject.clone().unwrap_or_default();
    if subject.is_empty() || subject.contains(char::is_whitespace) {
        p.add(
            "events.nats_subject",
            "is required with events.nats_url: the subject Lakekeeper publishes to \
             (LAKEKEEPER__NATS_TOPIC)",
        );
    }
    if let Some(stream) = &raw.nats_stream {
        if stream.is_empty() || !stream.chars().all(word) {
            p.add(
                "events.nats_stream",
                "must be a JetStream stream name: letters, digits, `_` or `-`",
            );
        }
    }
    let consumer = raw
        .nats_consumer
        .clone()
        .unwrap_or_else(default_nats_consumer);
    if consumer.is_empty() || !consumer.chars().all(word) {
        p.add(
            "events.nats_consumer",
            "must be letters, digits, `_` or `-`",
        );
    }
    let prefix_template = raw
        .prefix_template
        .clone()
        .unwrap_or_else(|| DEFAULT_PREFIX_TEMPLATE.to_owned());
    if !prefix_template.contains("{warehouse_id}") {
        p.add(
            "events.prefix_template",
            "must contain {warehouse_id} (a template naming no warehouse would send every \
             warehouse's events to one prefix)",
        );
    }
    Some(NatsSettings {
        url: url.to_owned(),
        subject,
        stream: raw.nats_stream.clone(),
        consumer,
        prefix_template,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{with_upstream, RawEvents, RawSettings, Settings};

    fn with(events: RawEvents) -> Result<Settings, String> {
        Settings::try_from(RawSettings {
            events,
            ..with_upstream()
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn no_events_by_default() {
        let settings = with(RawEvents::default()).unwrap();
        assert!(!settings.events.any_source());
        assert_eq!(settings.events.fresh_for, None);
    }

    #[test]
    fn a_long_window_without_a_source_is_refused() {
        let error = with(RawEvents {
            fresh_for: Some("300s".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(error.contains("events.fresh_for"), "{error}");
    }

    #[test]
    fn a_window_shorter_than_cache_fresh_for_is_refused() {
        let error = Settings::try_from(RawSettings {
            events: RawEvents {
                fresh_for: Some("1s".into()),
                nats_url: Some("nats://127.0.0.1:4222".into()),
                nats_subject: Some("lakekeeper".into()),
                ..Default::default()
            },
            ..with_upstream()
        })
        .map_err(|e| e.to_string())
        .unwrap_err();
        assert!(error.contains("at least cache.fresh_for"), "{error}");
    }

    #[test]
    fn nats_needs_a_subject_and_a_nats_url() {
        let error = with(RawEvents {
            nats_url: Some("http://127.0.0.1:4222".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(error.contains("events.nats_url"), "{error}");
        assert!(error.contains("events.nats_subject"), "{error}");
    }

    #[test]
    fn nats_settings_without_a_url_are_refused() {
        let error = with(RawEvents {
            nats_stream: Some("s".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(error.contains("events.nats_stream"), "{error}");
    }

    #[test]
    fn a_template_must_name_the_warehouse() {
        let error = with(RawEvents {
            nats_url: Some("nats://127.0.0.1:4222".into()),
            nats_subject: Some("lakekeeper".into()),
            prefix_template: Some("warehouse".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(error.contains("{warehouse_id}"), "{error}");
    }

    #[test]
    fn a_missing_or_empty_token_file_is_refused() {
        let missing = with(RawEvents {
            seaweedfs_token_file: Some("/nonexistent/token".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(missing.contains("events.seaweedfs_token_file"), "{missing}");
        let empty =
            std::env::temp_dir().join(format!("icecache-empty-token-{}", std::process::id()));
        std::fs::write(&empty, "\n").unwrap();
        let error = with(RawEvents {
            seaweedfs_token_file: Some(empty.clone()),
            ..Default::default()
        })
        .unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert!(error.contains("is empty"), "{error}");
    }

    #[test]
    fn the_default_consumer_is_this_hosts() {
        let settings = with(RawEvents {
            nats_url: Some("nats://127.0.0.1:4222".into()),
            nats_subject: Some("lakekeeper".into()),
            ..Default::default()
        })
        .unwrap();
        let consumer = settings.events.nats.unwrap().consumer;
        assert!(consumer.starts_with("icecache"), "{consumer}");
        assert!(consumer
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c)));
    }
}
