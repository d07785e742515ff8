"""Soak: icecache (release) in front of a real SeaweedFS catalog on loopback, for a bounded
time, with a mix of loads, conditional loads (304s), commits and purges across 1000 tables and
50 callers (told apart by an extra auth header). Every minute it prints RSS, open file
descriptors, errors, upstream calls and the hit ratio. It fails (exit 1) if a request errs that
should not, or if RSS or descriptors keep growing after warm-up.

usage: python3 benches/soak.py [--minutes 10] [--tables 1000] [--callers 50] [--threads 16]
needs: port 8181 free (SeaweedFS), cargo; installs the rest with scripts/test-env.sh.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATALOG = "http://127.0.0.1:8181"


def request(method, url, headers=None, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def token():
    req = urllib.request.Request(
        CATALOG + "/v1/oauth/tokens",
        data=b"grant_type=client_credentials&client_id=admin&client_secret=adminsecret")
    return json.loads(urllib.request.urlopen(req, timeout=10).read())["access_token"]


def wait(check, what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.25)
    sys.exit(f"{what} did not come up")


def process_stats(pid):
    status = open(f"/proc/{pid}/status").read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def metric_sum(text, name, label=None):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (label is None or label in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--callers", type=int, default=50)
    parser.add_argument("--threads", type=int, default=16)
    options = parser.parse_args()

    subprocess.run(["bash", "scripts/test-env.sh"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="icecache-soak-")
    procs = []
    try:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "admin", "AWS_SECRET_ACCESS_KEY": "adminsecret"}
        procs.append(subprocess.Popen(
            [os.path.join(ROOT, ".test-env/venv/bin/weed"), "mini", f"-dir={work}/data", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", "-tableBucket=warehouse", "-admin.ui=false", "-webdav=false",
             "-s3.port.lance=0", "-master.telemetry=false"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait(lambda: request("GET", CATALOG + "/v1/warehouse/namespaces",
                             {"Authorization": "Bearer " + token()})[0] == 200, "SeaweedFS")
        icecache = subprocess.Popen(
            [os.path.join(ROOT, "target/release/icecache"), "--upstream", CATALOG,
             "--listen", "127.0.0.1:28281", "--admin-listen", "127.0.0.1:29281",
             "--auth-headers", "x-caller", "--fresh-for", "2s", "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(icecache)
        base, admin = "http://127.0.0.1:28281/v1/warehouse", "http://127.0.0.1:29281"
        wait(lambda: request("GET", admin + "/healthz")[0] == 200, "icecache")

        auth = {"Authorization": "Bearer " + token()}
        request("POST", base + "/namespaces", auth, {"namespace": ["soak"]})
        schema = {"type": "struct", "schema-id": 0,
                  "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
        tables = [f"t{i}" for i in range(options.tables)]

        def create(chunk):
            for t in chunk:
                status = request("POST", base + "/namespaces/soak/tables", auth, {"name": t, "schema": schema})[0]
                assert status in (200, 409), status

        creators = [threading.Thread(target=create, args=(tables[i::8],)) for i in range(8)]
        for c in creators:
            c.start()
        for c in creators:
            c.join()

        stop = time.time() + options.minutes * 60
        counts = {"load": 0, "304": 0, "commit": 0, "purge": 0}
        errors = []
        lock = threading.Lock()

        def worker(seed):
            rng = random.Random(seed)
            etags = {}
            while time.time() < stop:
                caller = f"caller-{rng.randrange(options.callers)}"
                table = rng.choice(tables)
                headers = {**auth, "x-caller": caller}
                roll = rng.random()
                try:
                    if roll < 0.05:
                        status, _, _ = request(
                            "POST", f"{base}/namespaces/soak/tables/{table}", auth,
                            {"requirements": [], "updates": [{"action": "set-properties",
                                                             "updates": {"n": str(rng.random())}}]})
                        kind, ok = "commit", status == 200
                    elif roll < 0.06:
                        status = request("POST", f"{admin}/cache/purge?namespace=soak&table={table}")[0]
                        kind, ok = "purge", status == 200
                    else:
                        key = (caller, table)
                        if key in etags and rng.random() < 0.4:
                            headers["If-None-Match"] = etags[key]
                        status, h, _ = request("GET", f"{base}/namespaces/soak/tables/{table}", headers)
                        kind = "304" if status == 304 else "load"
                        ok = status in (200, 304) and (status == 200 or "If-None-Match" in headers)
                        if status == 200:
                            etags[key] = h.get("ETag")
                    with lock:
                        counts[kind] += 1
                        if not ok:
                            errors.append(f"{kind} {table} -> {status}")
                except Exception as e:  # a refused or broken connection is an error too
                    with lock:
                        errors.append(f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(options.threads)]
        for t in threads:
            t.start()
        print(f"# soak: {options.minutes:g} min, {options.tables} tables, {options.callers} callers, "
              f"{options.threads} client threads, {os.cpu_count()} cores\n")
        print("| minute | RSS MiB | fds | loads | 304s | commits | purges | errors | upstream calls | hit ratio |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        samples = []
        started = stop - options.minutes * 60
        for minute in range(1, int(-(-options.minutes // 1)) + 1):
            target = min(started + minute * 60, stop)
            while time.time() < target:
                time.sleep(min(1, target - time.time()))
            rss, fds = process_stats(icecache.pid)
            text = request("GET", admin + "/metrics")[2].decode()
            upstream = metric_sum(text, "icecache_upstream_responses_total")
            hits = metric_sum(text, "icecache_requests_total", 'cache="HIT"')
            misses = metric_sum(text, "icecache_requests_total", 'cache="MISS"') + \
                metric_sum(text, "icecache_requests_total", 'cache="REVALIDATED"')
            with lock:
                row = dict(counts, errors=len(errors))
            samples.append((rss, fds))
            print(f"| {minute} | {rss} | {fds} | {row['load']} | {row['304']} | {row['commit']} | "
                  f"{row['purge']} | {row['errors']} | {upstream:.0f} | {hits / max(hits + misses, 1):.3f} |",
                  flush=True)
        for t in threads:
            t.join()

        failures = []
        if errors:
            failures.append(f"{len(errors)} request errors, first: {errors[:5]}")
        if len(samples) >= 3:
            warm_rss, warm_fds = samples[1]
            last_rss, last_fds = samples[-1]
            if last_rss > max(warm_rss * 1.5, warm_rss + 64):
                failures.append(f"RSS grew from {warm_rss} MiB to {last_rss} MiB after warm-up")
            if last_fds > warm_fds + 64:
                failures.append(f"open descriptors grew from {warm_fds} to {last_fds}")
        print()
        if failures:
            print("FAILED: " + "; ".join(failures))
            sys.exit(1)
        print("passed: no request errors; RSS and descriptors flat after warm-up")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
