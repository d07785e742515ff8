//! SIGHUP re-reads the config file: live settings apply to the next request, restart-only ones
//! keep their running values, and an invalid file leaves the running configuration in place.

use crate::support::relay::Relay;
use crate::support::{catalog, hangup, x_cache, Api, ConfigFile, Icecache};

async fn setup(config: &ConfigFile) -> (Relay, Icecache, Api, String) {
    let relay = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&relay.url, &["--config", config.path()]).await;
    let api = Api::new(&icecache.url).await;
    let (namespace, table) = api.fresh_table("ns_reload").await;
    (
        relay,
        icecache,
        api,
        format!("/namespaces/{namespace}/tables/{table}"),
    )
}

#[tokio::test]
async fn a_new_fresh_for_applies_to_entries_already_cached() {
    let config = ConfigFile::new("[cache]\nfresh_for = \"1h\"\n");
    let (_relay, icecache, api, path) = setup(&config).await;
    api.get(&path).send().await.unwrap();
    assert_eq!(x_cache(&api.get(&path).send().await.unwrap()), "HIT");
    config.rewrite("[cache]\nfresh_for = \"0s\"\n");
    hangup(&icecache, "applied").await;
    assert_eq!(
        x_cache(&api.get(&path).send().await.unwrap()),
        "REVALIDATED"
    );
}

#[tokio::test]
async fn an_invalid_new_config_is_refused_and_the_running_one_stays() {
    let config = ConfigFile::new("[cache]\nfresh_for = \"1h\"\n");
    let (_relay, icecache, api, path) = setup(&config).await;
    api.get(&path).send().await.unwrap();
    config.rewrite("[cache]\nfresh_for = \"whenever\"\n");
    hangup(&icecache, "rejected").await;
    assert_eq!(x_cache(&api.get(&path).send().await.unwrap()), "HIT");
    config.rewrite("identity = \"shared\"\ncredentials = \"passthrough\"\n");
    hangup(&icecache, "rejected").await;
    assert_eq!(x_cache(&api.get(&path).send().await.unwrap()), "HIT");
}

#[tokio::test]
async fn an_admin_token_set_by_reload_protects_purge_at_once() {
    let config = ConfigFile::new("");
    let (_relay, icecache, _api, _path) = setup(&config).await;
    let client = reqwest::Client::new();
    let purge = format!("{}/cache/purge", icecache.admin);
    assert_eq!(client.post(&purge).send().await.unwrap().status(), 200);
    config.rewrite("admin_token = \"rotated\"\n");
    hangup(&icecache, "applied").await;
    assert_eq!(client.post(&purge).send().await.unwrap().status(), 401);
    let authorised = client
        .post(&purge)
        .bearer_auth("rotated")
        .send()
        .await
        .unwrap();
    assert_eq!(authorised.status(), 200);
}

#[tokio::test]
async fn restart_only_settings_keep_their_running_values() {
    let config = ConfigFile::new("workers = 1\n");
    let (_relay, icecache, api, path) = setup(&config).await;
    config.rewrite("workers = 4\nadmin_listen = \"127.0.0.1:1\"\n[cache]\nmax_bytes = \"1MiB\"\nmax_entry_bytes = \"1MiB\"\n");
    hangup(&icecache, "applied").await;
    // Still serving on the same ports, with the cache it started with.
    assert_eq!(api.get(&path).send().await.unwrap().status(), 200);
    let stats = crate::support::get_json(&format!("{}/cache/stats", icecache.admin)).await;
    assert_eq!(stats["max_bytes"], 256u64 << 20);
}
