"""What scripts/demo.sh shows, once the catalog and icecache run: a table seeded with pyiceberg,
then loads directly and through icecache side by side, a local 304, a commit seen on the next
load, the hit ratio from the metrics, and an answer under --credentials strip.

usage: demo.py CATALOG ICECACHE ICECACHE_ADMIN ICECACHE_STRIP
"""
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

CATALOG, ICECACHE, ADMIN, STRIP = sys.argv[1:5]
S3 = os.environ.get("ICECACHE_S3", "http://127.0.0.1:21833")
TABLE = "/v1/warehouse/namespaces/demo/tables/events"


def wait(what, ready, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        time.sleep(0.25)
    sys.exit(f"demo: {what} did not start within {seconds} s")


def token(base):
    data = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": "admin",
                                   "client_secret": "adminsecret"}).encode()
    with urllib.request.urlopen(f"{base}/v1/oauth/tokens", data=data, timeout=5) as r:
        return json.load(r)["access_token"]


def get(base, path, headers=None):
    """One GET: status, headers, body and milliseconds taken."""
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {TOKEN}",
                                                           **(headers or {})})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            body = r.read()
            status, answer_headers = r.status, r.headers
    except urllib.error.HTTPError as e:
        body, status, answer_headers = e.read(), e.code, e.headers
    return status, answer_headers, body, (time.perf_counter() - started) * 1000


def catalog(uri):
    return RestCatalog("demo", uri=uri, prefix="warehouse", credential="admin:adminsecret",
                       **{"s3.endpoint": S3, "s3.path-style-access": "true", "s3.region": "us-east-1",
                          "s3.access-key-id": "admin", "s3.secret-access-key": "adminsecret"})


def rows(n, start=0):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("what", pa.string())])
    return pa.table({"id": list(range(start, start + n)),
                     "what": [f"event {i}" for i in range(start, start + n)]}, schema=schema)


def line(label, status, ms, note=""):
    print(f"  {label:<34} {status:>3}  {ms:7.1f} ms  {note}")


wait("the catalog", lambda: bool(token(CATALOG)) and urllib.request.urlopen(
    urllib.request.Request(f"{CATALOG}/v1/warehouse/namespaces",
                           headers={"Authorization": f"Bearer {token(CATALOG)}"}), timeout=5).status == 200)
wait("icecache", lambda: urllib.request.urlopen(f"{ADMIN}/healthz", timeout=5).status == 200)
TOKEN = token(CATALOG)

print("icecache demo: a SeaweedFS Iceberg catalog on", CATALOG, "with icecache in front on", ICECACHE)
seed = catalog(CATALOG)
seed.create_namespace_if_not_exists("demo")
table = seed.create_table_if_not_exists(("demo", "events"), schema=rows(0).schema)
table.append(rows(3))
print("seeded demo.events with 3 rows\n")

def median_of(base, n=20, headers=None):
    """The last answer of n GETs, and the median time they took."""
    times = []
    for _ in range(n):
        status, answer_headers, body, ms = get(base, TABLE, headers)
        times.append(ms)
    return status, answer_headers, sorted(times)[n // 2]


print("loadTable demo.events (medians of 20 loads where it says so)")
status, _, ms = median_of(CATALOG)
line("the catalog itself (median)", status, ms)
status, headers, _, ms = get(ICECACHE, TABLE)
line("through icecache, first load", status, ms, f"x-cache: {headers['x-cache']}")
status, headers, ms = median_of(ICECACHE)
etag = headers["ETag"]
line("through icecache, then (median)", status, ms, f"x-cache: {headers['x-cache']}")
status, headers, ms = median_of(ICECACHE, headers={"If-None-Match": etag})
line("If-None-Match: its ETag (median)", status, ms,
     f"x-cache: {headers['x-cache']} (local 304s: the catalog was not asked)")

print("\na commit through icecache (pyiceberg appends 2 rows)")
through = catalog(ICECACHE)
through.load_table(("demo", "events")).append(rows(2, start=3))
status, headers, body, ms = get(ICECACHE, TABLE)
snapshot = json.loads(body)["metadata"].get("current-snapshot-id")
scanned = through.load_table(("demo", "events")).scan().to_arrow().num_rows
line("the next load through icecache", status, ms,
     f"x-cache: {headers['x-cache']}, snapshot {snapshot}: commit seen, {scanned} rows")

with urllib.request.urlopen(f"{ADMIN}/metrics", timeout=5) as r:
    metrics = r.read().decode()
loads = {}
for metric in metrics.splitlines():
    if metric.startswith("icecache_requests_total{") and 'route="load_table"' in metric:
        phase = metric.split('cache="')[1].split('"')[0]
        loads[phase] = loads.get(phase, 0) + float(metric.rsplit(" ", 1)[1])
total = sum(loads.values())
hits = loads.get("HIT", 0)
print(f"\nhit ratio from {ADMIN}/metrics: {hits:.0f} of {total:.0f} loadTable answers were "
      f"HIT ({100 * hits / total:.0f}%): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(loads.items())))

print("\nwith --credentials strip (a second icecache, on", STRIP + ")")
status, headers, body, ms = get(STRIP, TABLE, {"X-Iceberg-Access-Delegation": "vended-credentials"})
config = json.loads(body).get("config", {})
secrets = [k for k in config if any(s in k.lower() for s in ("secret", "token", "access-key"))]
line("loadTable, asking for vended credentials", status, ms,
     f"config keys {sorted(config)}: {'no secret' if not secrets else 'SECRETS ' + str(secrets)}")
if secrets:
    sys.exit("demo: a secret was served under strip")

KEEP = os.environ.get("ICECACHE_DEMO_KEEP") == "1"
TOKEN_COMMAND = (f"curl -s -d 'grant_type=client_credentials&client_id=admin&client_secret=adminsecret' "
                 f"{CATALOG}/v1/oauth/tokens | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"access_token\"])'")
print(f"""
Keep playing ({'everything runs until you press Ctrl-C' if KEEP else 'run ./scripts/demo.sh --keep to keep it all running'}):
  TOKEN=$({TOKEN_COMMAND})
  curl -s -D- -o /dev/null -H "Authorization: Bearer $TOKEN" {ICECACHE}{TABLE}
  curl -s {ADMIN}/metrics | grep icecache_requests_total
  .test-env/venv/bin/python -c 'from pyiceberg.catalog.rest import RestCatalog; c = RestCatalog("demo", uri="{ICECACHE}", prefix="warehouse", credential="admin:adminsecret"); print(c.load_table(("demo", "events")).metadata.current_snapshot_id)'
Run icecache in front of your own catalog: cargo run --release -- --upstream URL""")
