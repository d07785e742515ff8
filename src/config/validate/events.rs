//! The `[events]` table into `EventsSettings`.

use crate::config::keys::{needs, KEYS};
use crate::config::values::Values;
use crate::events::settings::{default_nats_consumer, EventsSettings, KafkaSettings, NatsSettings};
use crate::secret::Secret;

pub(super) fn settings(p: &mut Values) -> EventsSettings {
    let fresh_for = p.optional_duration("events.fresh_for");
    let seaweedfs_token = p.path("events.seaweedfs_token_file").and_then(|path| {
        match std::fs::read_to_string(&path) {
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
        }
    });
    let nats = nats(p);
    let kafka = kafka(p);
    let settings = EventsSettings {
        fresh_for,
        seaweedfs_token,
        nats,
        kafka,
    };
    if fresh_for.is_some() && !settings.any_source() {
        p.add(
            "events.fresh_for",
            "is set but no event source is (events.seaweedfs_token_file, events.nats_url or \
             events.kafka_brokers): \
             without events an entry cannot be kept fresh that long safely",
        );
    }
    settings
}

fn nats(p: &mut Values) -> Option<NatsSettings> {
    let Some(url) = p.text("events.nats_url").filter(|u| !u.is_empty()) else {
        for key in KEYS.iter() {
            if needs(key.name) == Some("events.nats_url") && p.is_set(key.name) {
                p.add(key.name, "is set but events.nats_url is not");
            }
        }
        return None;
    };
    p.show("events.nats_url", crate::secret::shown_url(&url));
    if !(url.starts_with("nats://") || url.starts_with("tls://")) {
        p.add(
            "events.nats_url",
            "use nats://host:4222 (or tls://host:4222)",
        );
    }
    let word = |c: char| c.is_ascii_alphanumeric() || "_-".contains(c);
    let subject = p.text("events.nats_subject").unwrap_or_default();
    if subject.is_empty() || subject.contains(char::is_whitespace) {
        p.add(
            "events.nats_subject",
            "is required with events.nats_url: the subject Lakekeeper publishes to \
             (LAKEKEEPER__NATS_TOPIC)",
        );
    }
    let stream = p.text("events.nats_stream");
    if let Some(stream) = &stream {
        if stream.is_empty() || !stream.chars().all(word) {
            p.add(
                "events.nats_stream",
                "must be a JetStream stream name: letters, digits, `_` or `-`",
            );
        }
    }
    let consumer = p
        .text("events.nats_consumer")
        .unwrap_or_else(default_nats_consumer);
    p.show("events.nats_consumer", consumer.clone());
    if consumer.is_empty() || !consumer.chars().all(word) {
        p.add(
            "events.nats_consumer",
            "must be letters, digits, `_` or `-`",
        );
    }
    let prefix_template = p.text("events.prefix_template").unwrap_or_default();
    if !prefix_template.contains("{warehouse_id}") {
        p.add(
            "events.prefix_template",
            "must contain {warehouse_id} (a template naming no warehouse would send every \
             warehouse's events to one prefix)",
        );
    }
    Some(NatsSettings {
        url,
        subject,
        stream,
        consumer,
        prefix_template,
    })
}

fn kafka(p: &mut Values) -> Option<KafkaSettings> {
    let Some(brokers) = p.text("events.kafka_brokers").filter(|b| !b.is_empty()) else {
        for key in KEYS.iter() {
            if needs(key.name) == Some("events.kafka_brokers") && p.is_set(key.name) {
                p.add(key.name, "is set but events.kafka_brokers is not");
            }
        }
        return None;
    };
    let broker = |b: &str| {
        b.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && !host.contains(['/', '@'])
                && !host.contains(char::is_whitespace)
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        })
    };
    if !brokers.split(',').all(broker) {
        p.add(
            "events.kafka_brokers",
            "use host:port, or several separated by commas (host:9092,host:9092), with no \
             scheme, user or password",
        );
    }
    // Kafka's own rule for topic names.
    let topic = p.text("events.kafka_topic").unwrap_or_default();
    let legal = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) {
        p.add(
            "events.kafka_topic",
            "must be a Kafka topic name: 1 to 249 letters, digits, `.`, `_` or `-`",
        );
    }
    let group = p
        .text("events.kafka_group")
        .unwrap_or_else(default_nats_consumer);
    p.show("events.kafka_group", group.clone());
    if group.is_empty() || !group.chars().all(legal) {
        p.add(
            "events.kafka_group",
            "must be letters, digits, `.`, `_` or `-`",
        );
    }
    let prefix_template = p.text("events.kafka_prefix_template").unwrap_or_default();
    let unknown = prefix_template
        .split('{')
        .skip(1)
        .map(|rest| rest.split('}').next().unwrap_or(rest))
        .find(|name| !matches!(*name, "catalog_name" | "realm_id"));
    if !prefix_template.contains("{catalog_name}") {
        p.add(
            "events.kafka_prefix_template",
            "must contain {catalog_name} (a template naming no catalog would send every \
             catalog's events to one prefix)",
        );
    } else if let Some(name) = unknown {
        p.add(
            "events.kafka_prefix_template",
            format!("names {{{name}}}: only {{catalog_name}} and {{realm_id}} are replaced"),
        );
    }
    Some(KafkaSettings {
        brokers,
        topic,
        group,
        prefix_template,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::raw::Raw;
    use crate::config::settings::Settings;

    fn with(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        let mut all: Vec<(&str, toml::Value)> = vec![("upstream", "http://127.0.0.1:8181".into())];
        all.extend(pairs.iter().map(|(k, v)| (*k, toml::Value::from(*v))));
        Settings::try_from(&Raw::of(&all).unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn no_events_by_default() {
        let settings = with(&[]).unwrap();
        assert!(!settings.events.any_source());
        assert_eq!(settings.events.fresh_for, None);
    }

    #[test]
    fn a_long_window_without_a_source_is_refused() {
        let error = with(&[("events.fresh_for", "300s")]).unwrap_err();
        assert!(error.contains("events.fresh_for"), "{error}");
    }

    #[test]
    fn a_window_shorter_than_cache_fresh_for_is_refused() {
        let error = with(&[
            ("events.fresh_for", "1s"),
            ("events.nats_url", "nats://127.0.0.1:4222"),
            ("events.nats_subject", "lakekeeper"),
        ])
        .unwrap_err();
        assert!(error.contains("at least cache.fresh_for"), "{error}");
    }

    #[test]
    fn nats_needs_a_subject_and_a_nats_url() {
        let error = with(&[("events.nats_url", "http://127.0.0.1:4222")]).unwrap_err();
        assert!(error.contains("events.nats_url"), "{error}");
        assert!(error.contains("events.nats_subject"), "{error}");
    }

    #[test]
    fn nats_settings_without_a_url_are_refused() {
        let error = with(&[("events.nats_stream", "s")]).unwrap_err();
        assert!(error.contains("events.nats_stream"), "{error}");
    }

    #[test]
    fn a_template_must_name_the_warehouse() {
        let error = with(&[
            ("events.nats_url", "nats://127.0.0.1:4222"),
            ("events.nats_subject", "lakekeeper"),
            ("events.prefix_template", "warehouse"),
        ])
        .unwrap_err();
        assert!(error.contains("{warehouse_id}"), "{error}");
    }

    #[test]
    fn kafka_takes_its_defaults_from_polaris() {
        let settings = with(&[("events.kafka_brokers", "127.0.0.1:9092")]).unwrap();
        assert!(settings.events.any_source());
        let kafka = settings.events.kafka.expect("a Kafka source");
        assert_eq!(kafka.topic, "polaris-catalog-events");
        assert_eq!(kafka.prefix_template, "{catalog_name}");
        assert!(kafka.group.starts_with("icecache"), "{}", kafka.group);
    }

    #[test]
    fn kafka_brokers_topic_group_and_template_are_checked() {
        for (key, value) in [
            ("events.kafka_brokers", "kafka://127.0.0.1:9092"),
            ("events.kafka_brokers", "127.0.0.1"),
            ("events.kafka_brokers", "127.0.0.1:9092,"),
            ("events.kafka_brokers", "127.0.0.1:0"),
            ("events.kafka_brokers", "user:hunter2@127.0.0.1:9092"),
            ("events.kafka_prefix_template", "{catalog_name}/{realm}"),
            ("events.kafka_topic", "polaris events"),
            ("events.kafka_topic", ""),
            ("events.kafka_group", "a/b"),
            ("events.kafka_prefix_template", "lake"),
        ] {
            let mut pairs = vec![("events.kafka_brokers", "127.0.0.1:9092")];
            pairs.retain(|(k, _)| *k != key);
            pairs.push((key, value));
            let error = with(&pairs).expect_err(value);
            assert!(error.contains(key), "{key}={value}: {error}");
        }
    }

    #[test]
    fn kafka_settings_without_brokers_are_refused() {
        let error = with(&[("events.kafka_topic", "t")]).unwrap_err();
        assert!(error.contains("events.kafka_brokers"), "{error}");
    }

    #[test]
    fn a_missing_or_empty_token_file_is_refused() {
        let missing = with(&[("events.seaweedfs_token_file", "/nonexistent/token")]).unwrap_err();
        assert!(missing.contains("events.seaweedfs_token_file"), "{missing}");
        let empty =
            std::env::temp_dir().join(format!("icecache-empty-token-{}", std::process::id()));
        std::fs::write(&empty, "\n").unwrap();
        let path = empty.display().to_string();
        let error = with(&[("events.seaweedfs_token_file", &path)]).unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert!(error.contains("is empty"), "{error}");
    }

    #[test]
    fn the_default_consumer_is_this_hosts() {
        let settings = with(&[
            ("events.nats_url", "nats://127.0.0.1:4222"),
            ("events.nats_subject", "lakekeeper"),
        ])
        .unwrap();
        let consumer = settings.events.nats.unwrap().consumer;
        assert!(consumer.starts_with("icecache"), "{consumer}");
        assert!(consumer
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c)));
    }
}
