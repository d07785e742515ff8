"""Writes a LoadTableResult of about SIZE bytes in the spec's shape: a table with as many
snapshots (each with a summary, like pyiceberg appends leave) as it takes.

usage: make_metadata.py SIZE_BYTES OUT_FILE
"""
import json
import sys


def snapshot(i):
    return {
        "snapshot-id": 1_000_000_000_000 + i,
        "parent-snapshot-id": 1_000_000_000_000 + i - 1 if i else None,
        "sequence-number": i + 1,
        "timestamp-ms": 1_760_000_000_000 + i * 60_000,
        "manifest-list": f"s3://warehouse/db/events/metadata/snap-{1_000_000_000_000 + i}-1-8f3e.avro",
        "summary": {
            "operation": "append",
            "added-data-files": "4",
            "added-records": "250000",
            "added-files-size": "18874368",
            "total-records": str(250000 * (i + 1)),
            "total-data-files": str(4 * (i + 1)),
        },
        "schema-id": 0,
    }


def main():
    size, out = int(sys.argv[1]), sys.argv[2]
    per_snapshot = len(json.dumps(snapshot(1))) + len(json.dumps({"snapshot-id": 1, "timestamp-ms": 1})) + 4
    count = max(1, size // per_snapshot)
    snapshots = [snapshot(i) for i in range(count)]
    body = {
        "metadata-location": "s3://warehouse/db/events/metadata/00042-6b1b.metadata.json",
        "metadata": {
            "format-version": 2,
            "table-uuid": "6b1b3c3e-0000-4000-8000-000000000001",
            "location": "s3://warehouse/db/events",
            "last-sequence-number": count,
            "last-updated-ms": 1_760_000_000_000 + count * 60_000,
            "last-column-id": 3,
            "current-schema-id": 0,
            "schemas": [{"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": False, "type": "long"},
                {"id": 2, "name": "name", "required": False, "type": "string"},
                {"id": 3, "name": "ts", "required": False, "type": "timestamptz"}]}],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {"write.format.default": "parquet"},
            "current-snapshot-id": snapshots[-1]["snapshot-id"],
            "refs": {"main": {"snapshot-id": snapshots[-1]["snapshot-id"], "type": "branch"}},
            "snapshots": snapshots,
            "snapshot-log": [{"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in snapshots],
            "metadata-log": [],
        },
        "config": {"s3.endpoint": "http://127.0.0.1:8333", "s3.path-style-access": "true"},
    }
    with open(out, "w") as f:
        json.dump(body, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
