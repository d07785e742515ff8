#!/usr/bin/env python3
"""Writes the compatibility matrix in docs/compatibility.md from what a run of the suite recorded
(target/compatibility/*.json, one file per row, written by the client and catalog tests).

usage: scripts/compatibility.py [--check]
  --check  only say whether the matrix in the docs matches the recorded rows (exit 1 if not)

The matrix sits between the markers `<!-- matrix:begin -->` and `<!-- matrix:end -->`.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORDS = ROOT / "target" / "compatibility"
DOC = ROOT / "docs" / "compatibility.md"
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"


def rows():
    merged = {}
    for path in sorted(RECORDS.glob("*.json")):
        record = json.loads(path.read_text())
        if "client" not in record:
            continue
        key = (record["client"], record["catalog"], record.get("policy", "passthrough"))
        if "loads" in record and "local_304s" in record:
            # The repeat-load count is its own figure: the scenario's count must not replace it.
            record["repeat_304s"] = record.pop("local_304s")
        merged.setdefault(key, {}).update(record)
    return merged


def cell_304(row):
    if "loads" in row and "repeat_304s" in row:
        return f"yes: {int(row['repeat_304s'])} of {row['loads'] - 1} repeat loads answered locally"
    if row.get("local_304s") == 0:
        return "none: the client sent no `If-None-Match`"
    if "local_304s" in row:
        return f"yes ({int(row['local_304s'])} local 304s in the run)"
    if "catalog_304s" in row:
        return (f"upstream: {row['catalog_304s']} of {row['loads'] - 1} revalidations "
                "answered 304 by the catalog")
    return "not measured"


def cell_calls(row):
    if "catalog_requests_direct" in row:
        return (f"{row['catalog_requests_direct']} → {row['catalog_requests_through']} "
                f"({row['loads']} loads of one table)")
    if "loads_direct" in row:
        return (f"{row['loads_direct']} → {row['loads_through']} "
                f"({row['queries']} queries)")
    return ""


def matrix():
    lines = [
        "| client | catalog | credentials | same answers | 304s end to end | catalog loadTable calls, directly → through icecache |",
        "|---|---|---|---|---|---|",
    ]
    for (client, catalog, policy), row in sorted(rows().items()):
        same = "yes" if row.get("identical") else "not compared"
        lines.append(f"| {client} | {catalog} | {policy} | {same} | {cell_304(row)} | {cell_calls(row)} |")
    return "\n".join(lines)


def main():
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + matrix() + "\n" + text[end:]
    if "--check" in sys.argv:
        sys.exit(0 if new == text else 1)
    DOC.write_text(new)
    print(f"compatibility.py: {len(rows())} rows written to {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
