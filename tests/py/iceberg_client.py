"""pyiceberg driven from the Rust integration tests: a real Iceberg client talking to the
catalog (directly or through icecache). Prints one JSON object on stdout.

usage: iceberg_client.py URI COMMAND NAMESPACE TABLE [ARG]
  append N    create the table if needed, then append N rows in one commit
  scan        read every row back
  load-refs   load with snapshot-loading-mode=refs
  exists      table_exists (a GET in pyiceberg 0.12)
  list        the namespace's tables
  drop        drop the table
"""
import json
import os
import sys

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

S3 = os.environ.get("ICECACHE_TEST_S3", "http://127.0.0.1:8333")
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


# ICECACHE_PY_CATALOG=plain: a catalog with no prefix and no OAuth (Iceberg's reference
# server); ICECACHE_PY_OWN_KEYS=0: the client brings no S3 keys (the catalog, or icecache's
# inject policy, gives them).
PLAIN = os.environ.get("ICECACHE_PY_CATALOG") == "plain"
OWN_KEYS = os.environ.get("ICECACHE_PY_OWN_KEYS", "1") == "1"


def catalog(uri, **extra):
    properties = {
        "s3.endpoint": S3,
        "s3.path-style-access": "true",
        "s3.region": "us-east-1",
    }
    if OWN_KEYS:
        properties["s3.access-key-id"] = "admin"
        properties["s3.secret-access-key"] = "adminsecret"
    if not PLAIN:
        properties["prefix"] = "warehouse"
        properties["credential"] = "admin:adminsecret"
    return RestCatalog("test", uri=uri, **properties, **extra)


def main():
    uri, command, namespace, table = sys.argv[1:5]
    identifier = (namespace, table)
    if command == "append":
        cat = catalog(uri)
        cat.create_namespace_if_not_exists(namespace)
        rows = int(sys.argv[5])
        t = cat.create_table_if_not_exists(identifier, schema=SCHEMA)
        start = len(t.scan().to_arrow()) if t.current_snapshot() else 0
        data = pa.table(
            {"id": list(range(start, start + rows)), "name": [f"row{i}" for i in range(start, start + rows)]},
            schema=SCHEMA,
        )
        t.append(data)
        print(json.dumps({"snapshot": t.current_snapshot().snapshot_id}))
    elif command == "scan":
        t = catalog(uri).load_table(identifier)
        rows = t.scan().to_arrow()
        snapshot = t.current_snapshot()
        print(json.dumps({
            "rows": rows.num_rows,
            "ids": sorted(rows.column("id").to_pylist()),
            "snapshot": snapshot.snapshot_id if snapshot else None,
        }))
    elif command == "load-refs":
        t = catalog(uri, **{"snapshot-loading-mode": "refs"}).load_table(identifier)
        print(json.dumps({"snapshots": len(t.metadata.snapshots)}))
    elif command == "exists":
        print(json.dumps({"exists": catalog(uri).table_exists(identifier)}))
    elif command == "load-view":
        view = catalog(uri, **{"view-endpoints-supported": "true"}).load_view(identifier)
        print(json.dumps({"properties": view.metadata.properties,
                          "version": view.metadata.current_version_id}))
    elif command == "view-exists":
        views = catalog(uri, **{"view-endpoints-supported": "true"})
        print(json.dumps({"exists": views.view_exists(identifier)}))
    elif command == "list":
        tables = sorted(".".join(t) for t in catalog(uri).list_tables(namespace))
        print(json.dumps({"tables": tables}))
    elif command == "drop":
        catalog(uri).drop_table(identifier)
        print(json.dumps({"dropped": True}))
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
