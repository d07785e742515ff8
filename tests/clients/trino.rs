//! Trino 476 (its Iceberg connector on a REST catalog, on Temurin 25) through icecache and
//! directly: the same workload returns the same rows, and the loadTable calls that reach the
//! catalog are counted per query. Trino keeps no table cache of its own (a new session per
//! access), so every query's loads reach the catalog unless icecache answers them. One Trino
//! serves the whole file.

use crate::jvm::ReferenceCatalog;
use crate::support::relay::Relay;
use crate::support::{catalog, unique, Icecache, PREFIX};
use crate::trino_server::Trino;
use serde_json::{json, Value};

/// The workload, `{t}` standing for `catalog.schema`. Every query's rows are compared.
const WORKLOAD: &[&str] = &[
    "CREATE SCHEMA {t}",
    "CREATE TABLE {t}.categories (id BIGINT, name VARCHAR)",
    "CREATE TABLE {t}.suppliers (id BIGINT, name VARCHAR, country VARCHAR)",
    "CREATE TABLE {t}.products (id BIGINT, name VARCHAR, category_id BIGINT, price DECIMAL(10,2), supplier_id BIGINT)",
    "CREATE TABLE {t}.customers (id BIGINT, name VARCHAR, region VARCHAR)",
    "CREATE TABLE {t}.orders (id BIGINT, customer_id BIGINT, status VARCHAR, day INTEGER) WITH (partitioning = ARRAY['status'])",
    "CREATE TABLE {t}.order_items (order_id BIGINT, product_id BIGINT, quantity INTEGER)",
    "CREATE TABLE {t}.shipments (order_id BIGINT, carrier VARCHAR, day INTEGER)",
    "CREATE TABLE {t}.payments (order_id BIGINT, amount DECIMAL(12,2), method VARCHAR)",
    "INSERT INTO {t}.categories SELECT id, 'category' || CAST(id AS VARCHAR) FROM UNNEST(sequence(1, 5)) AS x(id)",
    "INSERT INTO {t}.suppliers SELECT id, 'supplier' || CAST(id AS VARCHAR), CASE id % 3 WHEN 0 THEN 'DE' WHEN 1 THEN 'FR' ELSE 'JP' END FROM UNNEST(sequence(1, 8)) AS x(id)",
    "INSERT INTO {t}.products SELECT id, 'product' || CAST(id AS VARCHAR), id % 5 + 1, CAST(id * 1.25 AS DECIMAL(10,2)), id % 8 + 1 FROM UNNEST(sequence(1, 40)) AS x(id)",
    "INSERT INTO {t}.customers SELECT id, 'customer' || CAST(id AS VARCHAR), CASE id % 3 WHEN 0 THEN 'eu' WHEN 1 THEN 'us' ELSE 'apac' END FROM UNNEST(sequence(1, 50)) AS x(id)",
    "INSERT INTO {t}.orders SELECT id, id % 50 + 1, CASE id % 4 WHEN 0 THEN 'new' WHEN 1 THEN 'paid' WHEN 2 THEN 'shipped' ELSE 'done' END, CAST(id % 28 AS INTEGER) FROM UNNEST(sequence(1, 200)) AS x(id)",
    "INSERT INTO {t}.order_items SELECT id % 200 + 1, id % 40 + 1, CAST(id % 7 + 1 AS INTEGER) FROM UNNEST(sequence(1, 600)) AS x(id)",
    "INSERT INTO {t}.shipments SELECT id, CASE id % 3 WHEN 0 THEN 'slow' ELSE 'fast' END, CAST(id % 28 AS INTEGER) FROM UNNEST(sequence(1, 150)) AS x(id)",
    "INSERT INTO {t}.payments SELECT o.id, CAST(sum(p.price * i.quantity) AS DECIMAL(12,2)), 'card' FROM {t}.orders o JOIN {t}.order_items i ON i.order_id = o.id JOIN {t}.products p ON p.id = i.product_id GROUP BY o.id",
    "MERGE INTO {t}.orders o USING (SELECT id, 'returned' AS status FROM UNNEST(sequence(190, 210)) AS x(id)) s ON o.id = s.id WHEN MATCHED THEN UPDATE SET status = s.status WHEN NOT MATCHED THEN INSERT (id, customer_id, status, day) VALUES (s.id, 1, s.status, 0)",
    "UPDATE {t}.products SET price = price * 1.10 WHERE category_id = 2",
    "DELETE FROM {t}.shipments WHERE carrier = 'slow'",
    "ALTER TABLE {t}.customers ADD COLUMN tier VARCHAR",
    "UPDATE {t}.customers SET tier = CASE WHEN id % 10 = 0 THEN 'gold' ELSE 'basic' END",
    "SELECT c.region, count(DISTINCT o.id), sum(i.quantity) FROM {t}.customers c JOIN {t}.orders o ON o.customer_id = c.id JOIN {t}.order_items i ON i.order_id = o.id GROUP BY c.region ORDER BY c.region",
    "SELECT cat.name, CAST(sum(p.price * i.quantity) AS DECIMAL(14,2)) AS revenue FROM {t}.order_items i JOIN {t}.products p ON p.id = i.product_id JOIN {t}.categories cat ON cat.id = p.category_id GROUP BY cat.name ORDER BY revenue DESC, cat.name",
    "SELECT s.country, count(*) FROM {t}.suppliers s JOIN {t}.products p ON p.supplier_id = s.id GROUP BY s.country ORDER BY s.country",
    "SELECT o.status, count(*) FROM {t}.orders o WHERE NOT EXISTS (SELECT 1 FROM {t}.shipments sh WHERE sh.order_id = o.id) GROUP BY o.status ORDER BY o.status",
    "SELECT c.tier, count(*), CAST(sum(pay.amount) AS DECIMAL(14,2)) FROM {t}.customers c JOIN {t}.orders o ON o.customer_id = c.id JOIN {t}.payments pay ON pay.order_id = o.id GROUP BY c.tier ORDER BY c.tier",
    "SELECT count(*) FROM {t}.\"orders$snapshots\"",
    "SELECT status, count(*) FROM {t}.orders GROUP BY status ORDER BY status",
    "DROP TABLE {t}.payments",
    "SHOW TABLES FROM {t}",
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

/// Runs the workload in `catalog` under a new schema: each query's rows and the loadTable calls
/// that reached the catalog behind `relay` while it ran.
async fn run_workload(
    trino: &Trino,
    catalog: &str,
    relay: &Relay,
) -> Vec<(Vec<Vec<Value>>, usize)> {
    let target = format!("{catalog}.{}", unique("trino"));
    let mut results = Vec::new();
    for query in WORKLOAD {
        let before = loads(relay);
        let rows = trino.query(&query.replace("{t}", &target)).await;
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
    warehouse: Option<&str>,
    auth: bool,
) {
    let trino = Trino::shared().await;
    let around = Relay::start(upstream).await;
    let behind = Relay::start(upstream).await;
    let icecache = Icecache::start(&behind.url, &[]).await;
    let direct = trino.iceberg_catalog(&around.url, warehouse, auth).await;
    let through = trino.iceberg_catalog(&icecache.url, warehouse, auth).await;
    let directly = run_workload(trino, &direct, &around).await;
    let cached = run_workload(trino, &through, &behind).await;
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
        json!({ "client": "Trino 476", "catalog": catalog_name, "policy": "passthrough",
                "identical": true, "queries": WORKLOAD.len(),
                "loads_direct": total_direct, "loads_through": total_cached,
                "local_304s": local }),
    );
    assert!(total_direct > 0, "the workload loaded tables");
    assert!(
        total_cached < total_direct,
        "icecache answered some of Trino's loads"
    );
    let revenue = &directly[WORKLOAD
        .iter()
        .position(|q| q.contains("AS revenue"))
        .unwrap()]
    .0;
    assert_eq!(
        revenue.len(),
        5,
        "the joins saw the inserted rows: {revenue:?}"
    );
}

#[tokio::test]
async fn trino_through_icecache_returns_the_same_rows_as_directly_from_seaweedfs() {
    same_rows_both_ways(
        "trino-seaweedfs",
        "SeaweedFS 4.48",
        &catalog(),
        Some(PREFIX),
        true,
    )
    .await;
}

#[tokio::test]
async fn trino_through_icecache_returns_the_same_rows_as_directly_from_the_reference_catalog() {
    let reference = ReferenceCatalog::shared().await;
    same_rows_both_ways(
        "trino-reference",
        "Iceberg reference server 1.11.0",
        &reference.url,
        None,
        false,
    )
    .await;
}
