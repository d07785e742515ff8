"""DuckDB 1.5.5 with its iceberg, httpfs and avro extensions (loaded from their PyPI wheels,
autoinstall off) reading a table through an Iceberg REST endpoint. Prints one JSON object.

usage: duckdb_client.py ENDPOINT NAMESPACE TABLE
"""
import importlib
import json
import os
import pathlib
import sys

import duckdb

S3 = os.environ.get("ICECACHE_TEST_S3", "http://127.0.0.1:8333").removeprefix("http://")


def main():
    endpoint, namespace, table = sys.argv[1:4]
    con = duckdb.connect(
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    )
    for name in ["httpfs", "avro", "iceberg"]:
        module = importlib.import_module(f"duckdb_extension_{name}")
        path = next(pathlib.Path(module.__path__[0]).rglob("*.duckdb_extension"))
        con.execute(f"LOAD '{path}'")
    con.execute(
        "CREATE SECRET s3 (TYPE s3, KEY_ID 'admin', SECRET 'adminsecret', "
        f"ENDPOINT '{S3}', URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')"
    )
    con.execute(
        "CREATE SECRET ice (TYPE iceberg, CLIENT_ID 'admin', CLIENT_SECRET 'adminsecret', "
        f"OAUTH2_SERVER_URI '{endpoint}/v1/oauth/tokens')"
    )
    con.execute(f"ATTACH 'warehouse' AS cat (TYPE iceberg, ENDPOINT '{endpoint}', SECRET ice)")
    count = con.execute(f"SELECT count(*) FROM cat.{namespace}.{table}").fetchone()[0]
    filtered = [
        row[0]
        for row in con.execute(
            f"SELECT id FROM cat.{namespace}.{table} WHERE id % 2 = 1 ORDER BY id"
        ).fetchall()
    ]
    print(json.dumps({"count": count, "odd_ids": filtered}))


if __name__ == "__main__":
    main()
