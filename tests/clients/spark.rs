//! Spark SQL (pyspark 3.5 with the Iceberg 1.11.0 Spark runtime, local[2], catalog type rest)
//! through icecache and directly: a workload of DDL, INSERT, MERGE INTO, UPDATE, DELETE, schema
//! evolution and joins over eight tables returns the same rows both ways, concurrent writers
//! land every commit both ways, and the loadTable calls that reach the catalog are counted per
//! query. One Spark session serves the whole file.

use crate::jvm::{client, seaweedfs_client, ReferenceCatalog, Spark};
use crate::support::relay::Relay;
use crate::support::{catalog, unique, Icecache};
use serde_json::{json, Value};

/// The workload, `{t}` standing for `catalog.namespace`. Every query's rows are compared.
const WORKLOAD: &[&str] = &[
    "CREATE NAMESPACE {t}",
    "CREATE TABLE {t}.categories (id BIGINT, name STRING) USING iceberg",
    "CREATE TABLE {t}.suppliers (id BIGINT, name STRING, country STRING) USING iceberg",
    "CREATE TABLE {t}.products (id BIGINT, name STRING, category_id BIGINT, price DECIMAL(10,2), supplier_id BIGINT) USING iceberg",
    "CREATE TABLE {t}.customers (id BIGINT, name STRING, region STRING) USING iceberg",
    "CREATE TABLE {t}.orders (id BIGINT, customer_id BIGINT, status STRING, day INT) USING iceberg PARTITIONED BY (status)",
    "CREATE TABLE {t}.order_items (order_id BIGINT, product_id BIGINT, quantity INT) USING iceberg",
    "CREATE TABLE {t}.shipments (order_id BIGINT, carrier STRING, day INT) USING iceberg",
    "CREATE TABLE {t}.payments (order_id BIGINT, amount DECIMAL(12,2), method STRING) USING iceberg",
    "INSERT INTO {t}.categories SELECT id, concat('category', id) FROM range(1, 6)",
    "INSERT INTO {t}.suppliers SELECT id, concat('supplier', id), CASE id % 3 WHEN 0 THEN 'DE' WHEN 1 THEN 'FR' ELSE 'JP' END FROM range(1, 9)",
    "INSERT INTO {t}.products SELECT id, concat('product', id), id % 5 + 1, CAST(id * 1.25 AS DECIMAL(10,2)), id % 8 + 1 FROM range(1, 41)",
    "INSERT INTO {t}.customers SELECT id, concat('customer', id), CASE id % 3 WHEN 0 THEN 'eu' WHEN 1 THEN 'us' ELSE 'apac' END FROM range(1, 51)",
    "INSERT INTO {t}.orders SELECT id, id % 50 + 1, CASE id % 4 WHEN 0 THEN 'new' WHEN 1 THEN 'paid' WHEN 2 THEN 'shipped' ELSE 'done' END, CAST(id % 28 AS INT) FROM range(1, 201)",
    "INSERT INTO {t}.order_items SELECT id % 200 + 1, id % 40 + 1, CAST(id % 7 + 1 AS INT) FROM range(1, 601)",
    "INSERT INTO {t}.shipments SELECT id, CASE id % 3 WHEN 0 THEN 'slow' ELSE 'fast' END, CAST(id % 28 AS INT) FROM range(1, 151)",
    "INSERT INTO {t}.payments SELECT o.id, CAST(sum(p.price * i.quantity) AS DECIMAL(12,2)), 'card' FROM {t}.orders o JOIN {t}.order_items i ON i.order_id = o.id JOIN {t}.products p ON p.id = i.product_id GROUP BY o.id",
    "MERGE INTO {t}.orders o USING (SELECT id, 'returned' AS status FROM range(190, 211)) s ON o.id = s.id WHEN MATCHED THEN UPDATE SET o.status = s.status WHEN NOT MATCHED THEN INSERT (id, customer_id, status, day) VALUES (s.id, 1, s.status, 0)",
    "UPDATE {t}.products SET price = price * 1.10 WHERE category_id = 2",
    "DELETE FROM {t}.shipments WHERE carrier = 'slow'",
    "ALTER TABLE {t}.customers ADD COLUMN tier STRING",
    "UPDATE {t}.customers SET tier = CASE WHEN id % 10 = 0 THEN 'gold' ELSE 'basic' END",
    "SELECT c.region, count(DISTINCT o.id), sum(i.quantity) FROM {t}.customers c JOIN {t}.orders o ON o.customer_id = c.id JOIN {t}.order_items i ON i.order_id = o.id GROUP BY c.region ORDER BY c.region",
    "SELECT cat.name, CAST(sum(p.price * i.quantity) AS DECIMAL(14,2)) AS revenue FROM {t}.order_items i JOIN {t}.products p ON p.id = i.product_id JOIN {t}.categories cat ON cat.id = p.category_id GROUP BY cat.name ORDER BY revenue DESC, cat.name",
    "SELECT s.country, count(*) FROM {t}.suppliers s JOIN {t}.products p ON p.supplier_id = s.id GROUP BY s.country ORDER BY s.country",
    "SELECT o.status, count(*) FROM {t}.orders o LEFT ANTI JOIN {t}.shipments sh ON sh.order_id = o.id GROUP BY o.status ORDER BY o.status",
    "SELECT c.tier, count(*), CAST(sum(pay.amount) AS DECIMAL(14,2)) FROM {t}.customers c JOIN {t}.orders o ON o.customer_id = c.id JOIN {t}.payments pay ON pay.order_id = o.id GROUP BY c.tier ORDER BY c.tier",
    "SELECT count(*) FROM {t}.orders.snapshots",
    "SELECT status, count(*) FROM {t}.orders GROUP BY status ORDER BY status",
    "DROP TABLE {t}.payments",
    "SHOW TABLES IN {t}",
];

/// The GETs of a table (loadTable) that reached the catalog behind `relay`.
fn loads(relay: &Relay) -> usize {
    relay
        .seen()
        .iter()
        .filter(|s| {
            let path = s.path_and_query.split('?').next().unwrap_or("");
            let segments: Vec<&str> = path.split('/').collect();
            s.method == "GET" && segments.len() >= 2 && segments[segments.len() - 2] == "tables"
        })
        .count()
}

/// Registers a Spark catalog with these properties and returns its name.
async fn spark_catalog(properties: Value) -> String {
    let name = unique("c");
    Spark::shared()
        .await
        .call(json!({ "op": "catalog", "name": name, "properties": properties }))
        .await;
    name
}

/// Runs the workload in `catalog` under a new namespace: each query's rows and the loadTable
/// calls that reached the catalog behind `relay` while it ran.
async fn run_workload(catalog: &str, relay: &Relay) -> Vec<(Value, usize)> {
    let target = format!("{catalog}.{}", unique("spark"));
    let spark = Spark::shared().await;
    let mut results = Vec::new();
    for query in WORKLOAD {
        let before = loads(relay);
        let rows = spark
            .call(json!({ "op": "sql", "query": query.replace("{t}", &target) }))
            .await;
        // SHOW TABLES names the namespace, which differs between the runs.
        let rows = if query.starts_with("SHOW TABLES") {
            json!(rows
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r[1].clone())
                .collect::<Vec<_>>())
        } else {
            rows
        };
        results.push((rows, loads(relay) - before));
    }
    results
}

/// The workload directly and through icecache in front of the catalog at `upstream`; prints
/// and records the loads per query.
async fn same_rows_both_ways(
    row: &str,
    catalog_name: &str,
    upstream: &str,
    client: fn(&str) -> Value,
) {
    let around = Relay::start(upstream).await;
    let behind = Relay::start(upstream).await;
    let icecache = Icecache::start(&behind.url, &[]).await;
    let direct = spark_catalog(client(&around.url)).await;
    let through = spark_catalog(client(&icecache.url)).await;
    let directly = run_workload(&direct, &around).await;
    let cached = run_workload(&through, &behind).await;
    println!(
        "{catalog_name}: catalog loadTable calls per query: directly | through icecache | query"
    );
    for (i, query) in WORKLOAD.iter().enumerate() {
        assert_eq!(cached[i].0, directly[i].0, "rows of {query}");
        println!("{:>4} | {:>4} | {query:.100}", directly[i].1, cached[i].1);
    }
    let total_direct: usize = directly.iter().map(|r| r.1).sum();
    let total_cached: usize = cached.iter().map(|r| r.1).sum();
    println!("total: {total_direct} directly, {total_cached} through icecache");
    let local = crate::support::metric(
        &icecache.metrics().await,
        "icecache_cache_not_modified_total",
    );
    crate::compatibility::record(
        row,
        json!({ "client": "Spark 3.5.8 (Iceberg 1.11.0 runtime)", "catalog": catalog_name,
                "policy": "passthrough", "identical": true, "queries": WORKLOAD.len(),
                "loads_direct": total_direct, "loads_through": total_cached,
                "local_304s": local }),
    );
    assert!(total_direct > 0, "the workload loaded tables");
    assert!(
        total_cached <= total_direct,
        "icecache never asks the catalog more than the client asks it"
    );
    // The rows themselves were real: the joins saw the inserted data.
    let revenue = &directly[WORKLOAD
        .iter()
        .position(|q| q.contains("AS revenue"))
        .unwrap()]
    .0;
    assert_eq!(revenue.as_array().map(Vec::len), Some(5), "{revenue}");
}

#[tokio::test]
async fn spark_sql_through_icecache_returns_the_same_rows_as_directly_from_seaweedfs() {
    same_rows_both_ways(
        "spark-seaweedfs",
        "SeaweedFS 4.48",
        &catalog(),
        seaweedfs_client,
    )
    .await;
}

#[tokio::test]
async fn spark_sql_through_icecache_returns_the_same_rows_as_directly_from_the_reference_catalog() {
    let reference = ReferenceCatalog::shared().await;
    same_rows_both_ways(
        "spark-reference",
        "Iceberg reference server 1.11.0",
        &reference.url,
        client,
    )
    .await;
}

#[tokio::test]
async fn concurrent_spark_writers_land_every_commit_through_icecache_as_directly() {
    let around = Relay::start(&catalog()).await;
    let behind = Relay::start(&catalog()).await;
    let icecache = Icecache::start(&behind.url, &[]).await;
    let spark = Spark::shared().await;
    for (uri, relay) in [
        (around.url.clone(), &around),
        (icecache.url.clone(), &behind),
    ] {
        let catalog = spark_catalog(seaweedfs_client(&uri)).await;
        let table = format!("{catalog}.{}.events", unique("race"));
        let namespace = table.rsplit_once('.').unwrap().0.to_owned();
        spark
            .call(json!({ "op": "sql", "query": format!("CREATE NAMESPACE {namespace}") }))
            .await;
        spark
            .call(json!({ "op": "sql", "query": format!("CREATE TABLE {table} (writer INT, n BIGINT) USING iceberg") }))
            .await;
        for round in 0..3 {
            let queries: Vec<String> = (0..2)
                .map(|w| format!("INSERT INTO {table} SELECT {w}, id FROM range({round} * 10, {round} * 10 + 10)"))
                .collect();
            let outcomes = spark
                .call(json!({ "op": "concurrent", "queries": queries }))
                .await;
            assert_eq!(outcomes, json!(["ok", "ok"]), "{uri}, round {round}");
        }
        let counted = spark
            .call(json!({ "op": "sql", "query": format!("SELECT writer, count(*) FROM {table} GROUP BY writer ORDER BY writer") }))
            .await;
        assert_eq!(counted, json!([["0", "30"], ["1", "30"]]), "{uri}");
        let conflicts = relay.statuses().iter().filter(|s| **s == 409).count();
        println!("{uri}: {conflicts} commits refused with 409 and retried");
    }
}
