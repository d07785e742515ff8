"""Load benchmark, side by side in one run, loopback only, every run bounded in time:

  ceiling  the fixture server answering the body from memory (a minimal hyper server)
  icecache in front of the fixture
  nginx    proxy_cache in front of the same fixture (key: method, URI, Authorization,
           X-Iceberg-Access-Delegation)

for a 50 KB loadTable body (200s with a warm cache, and 304s), a 20 MB body with and without
gzip, a herd of 500 concurrent cold loads, and memory at 10k entries.

usage: python3 benches/load.py [--duration SECONDS] [--connections N]
needs: cargo, wrk and nginx (apt-get install wrk nginx-light).
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "Bearer benchmark-token"
PATH = "/v1/warehouse/namespaces/db/tables/events"
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.05)
    sys.exit(f"{url} did not answer")


def get(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, dict(response.headers), response.read()


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except FileNotFoundError:
            pass
    return total / TICKS


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wrk(url, headers, duration, connections, pids):
    args = ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency", url]
    for name, value in headers.items():
        args += ["-H", f"{name}: {value}"]
    before = cpu_seconds(pids)
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(pids) - before
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)

    def percentile(p):
        m = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out)
        value, unit = float(m.group(1)), m.group(2)
        return value * {"us": 0.001, "ms": 1, "s": 1000}[unit]

    return {
        "rps": rps,
        "p50": percentile(50),
        "p99": percentile(99),
        "cpu_us": cpu / max(requests, 1) * 1e6,
        "errors": int(errors.group(1)) if errors else 0,
    }


class Processes:
    def __init__(self):
        self.procs = []

    def start(self, args, **kwargs):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
        self.procs.append(proc)
        return proc

    def stop(self, proc):
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()

    def stop_all(self):
        for proc in reversed(self.procs):
            if proc.poll() is None:
                self.stop(proc)


def cargo_bench_binary(name):
    out = subprocess.run(
        ["cargo", "bench", "--bench", name, "--no-run", "--message-format=json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    for line in out.splitlines():
        message = json.loads(line)
        if message.get("executable") and message.get("target", {}).get("name") == name:
            return message["executable"]
    sys.exit(f"no binary for bench {name}")


NGINX_CONF = """
{user}
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=tables:64m max_size=1g inactive=10m use_temp_path=off;
    upstream fixture {{ server 127.0.0.1:{upstream}; keepalive 64; }}
    gzip {gzip};
    gzip_proxied any;
    gzip_types application/json;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://fixture;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache tables;
            proxy_cache_key "$request_method$request_uri$http_authorization$http_x_iceberg_access_delegation";
            proxy_cache_valid 200 5s;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 30s;
            proxy_buffers 64 64k;
            proxy_max_temp_file_size 64m;
        }}
    }}
}}
"""


def start_nginx(ps, workdir, upstream, gzip):
    port = free_port()
    conf = os.path.join(workdir, f"nginx-{port}.conf")
    os.makedirs(os.path.join(workdir, "cache"), exist_ok=True)
    with open(conf, "w") as f:
        # As root, workers would switch to an unprivileged user that cannot write the temp dir.
        user = "user root;" if os.geteuid() == 0 else ""
        f.write(NGINX_CONF.format(user=user, workers=os.cpu_count(), dir=workdir, upstream=upstream, port=port,
                                  gzip="on" if gzip else "off"))
    proc = ps.start(["nginx", "-c", conf, "-g", "daemon off;"])
    url = f"http://127.0.0.1:{port}"
    wait_for(url + PATH)
    return proc, url


def start_icecache(ps, icecache, upstream, extra=()):
    port, admin = free_port(), free_port()
    proc = ps.start([icecache, "--upstream", f"http://127.0.0.1:{upstream}", "--listen",
                     f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
                     "--log-level", "warn", "--fresh-for", "1h", *extra])
    wait_for(f"http://127.0.0.1:{admin}/healthz")
    return proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"


def start_fixture(ps, fixture, body, etag="", delay_ms=0):
    port = free_port()
    proc = ps.start([fixture, f"127.0.0.1:{port}", body, etag, str(delay_ms)])
    wait_for(f"http://127.0.0.1:{port}/__count")
    return proc, port


def row(name, result, ratio=""):
    return (f"| {name} | {result['rps']:.0f} | {result['p50']:.3f} | {result['p99']:.3f} | "
            f"{result['cpu_us']:.1f} | {ratio} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    options = parser.parse_args()
    for tool in ["wrk", "nginx", "cargo"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install wrk nginx-light")
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    icecache = os.path.join(ROOT, "target/release/icecache")
    fixture = cargo_bench_binary("fixture_server")

    workdir = tempfile.mkdtemp(prefix="icecache-bench-")
    small, large = os.path.join(workdir, "50k.json"), os.path.join(workdir, "20m.json")
    for size, path in [(51200, small), (20 * 1024 * 1024, large)]:
        subprocess.run([sys.executable, os.path.join(ROOT, "benches/make_metadata.py"), str(size), path], check=True)
    ps = Processes()
    auth = {"Authorization": TOKEN}
    d, c = options.duration, options.connections
    try:
        print(f"# {os.cpu_count()} cores; wrk -t2 -c{c} -d{d}s, HTTP/1.1 keep-alive, warm caches\n")
        fixture_proc, upstream = start_fixture(ps, fixture, small, '"fixture-v1"')
        ice_proc, ice_url, ice_admin = start_icecache(ps, icecache, upstream)
        ngx_proc, ngx_url = start_nginx(ps, workdir, upstream, gzip=False)
        ngx_pids = lambda: [ngx_proc.pid, *children(ngx_proc.pid)]
        for url in (ice_url, ngx_url):
            get(url + PATH, auth)
        ceiling = wrk(f"http://127.0.0.1:{upstream}{PATH}", auth, d, c, [fixture_proc.pid])
        ice = wrk(ice_url + PATH, auth, d, c, [ice_proc.pid])
        ngx = wrk(ngx_url + PATH, auth, d, c, ngx_pids())
        print("## 50 KB body, cache hit (200)\n")
        print("| server | req/s | p50 ms | p99 ms | CPU µs/req | icecache ÷ this |")
        print("|---|---|---|---|---|---|")
        print(row("static-bytes ceiling", ceiling, f"{ice['rps'] / ceiling['rps']:.2f}"))
        print(row("nginx proxy_cache", ngx, f"{ice['rps'] / ngx['rps']:.2f}"))
        print(row("icecache", ice))

        _, headers, _ = get(ice_url + PATH, auth)
        ice_304 = wrk(ice_url + PATH, {**auth, "If-None-Match": headers["ETag"]}, d, c, [ice_proc.pid])
        ngx_304 = wrk(ngx_url + PATH, {**auth, "If-None-Match": '"fixture-v1"'}, d, c, ngx_pids())
        print("\n## 50 KB body, local 304\n")
        print("| server | req/s | p50 ms | p99 ms | CPU µs/req | icecache ÷ this |")
        print("|---|---|---|---|---|---|")
        print(row("nginx proxy_cache", ngx_304, f"{ice_304['rps'] / ngx_304['rps']:.2f}"))
        print(row("icecache", ice_304))
        for proc in (ice_proc, ngx_proc, fixture_proc):
            ps.stop(proc)

        fixture_proc, upstream = start_fixture(ps, fixture, large)
        ice_proc, ice_url, _ = start_icecache(ps, icecache, upstream)
        ngx_proc, ngx_url = start_nginx(ps, workdir, upstream, gzip=True)
        gz = {**auth, "Accept-Encoding": "gzip"}
        for url in (ice_url, ngx_url):
            get(url + PATH, auth)
            get(url + PATH, gz)
        big_c = min(c, 8)
        print(f"\n## 20 MB body, cache hit, -c{big_c}\n")
        print("| server | encoding | req/s | p50 ms | p99 ms | CPU µs/req | icecache ÷ nginx |")
        print("|---|---|---|---|---|---|---|")
        for label, headers in [("identity", auth), ("gzip", gz)]:
            ice_big = wrk(ice_url + PATH, headers, d, big_c, [ice_proc.pid])
            ngx_big = wrk(ngx_url + PATH, headers, d, big_c, ngx_pids())
            for name, r, ratio in [("nginx", ngx_big, ""), ("icecache", ice_big, f"{ice_big['rps'] / ngx_big['rps']:.2f}")]:
                print(f"| {name} | {label} | {r['rps']:.1f} | {r['p50']:.1f} | {r['p99']:.1f} | "
                      f"{r['cpu_us']:.0f} | {ratio} |")
        for proc in (ice_proc, ngx_proc, fixture_proc):
            ps.stop(proc)

        print("\n## Herd: 500 concurrent cold loads of one table (fixture answers after 300 ms)\n")
        print("| server | upstream requests | slowest answer ms |")
        print("|---|---|---|")
        for name in ("icecache", "nginx (proxy_cache_lock on)"):
            fixture_proc, upstream = start_fixture(ps, fixture, small, "", 300)
            if name == "icecache":
                proc, url, _ = start_icecache(ps, icecache, upstream)
            else:
                proc, url = start_nginx(ps, workdir + f"/herd-{upstream}", upstream, gzip=False)
            # nginx's readiness probe above made one request; count from here.
            before = int(get(f"http://127.0.0.1:{upstream}/__count")[2])
            herd_path = PATH.replace("events", "herd")
            started = time.time()
            with concurrent.futures.ThreadPoolExecutor(500) as pool:
                statuses = list(pool.map(lambda _: get(url + herd_path, auth)[0], range(500)))
            slowest = (time.time() - started) * 1000
            count = int(get(f"http://127.0.0.1:{upstream}/__count")[2]) - before
            assert all(s == 200 for s in statuses), statuses
            print(f"| {name} | {count} | {slowest:.0f} |")
            ps.stop(proc)
            ps.stop(fixture_proc)

        print("\n## Memory at 10k entries (50 KB bodies)\n")
        fixture_proc, upstream = start_fixture(ps, fixture, small)
        ice_proc, ice_url, ice_admin = start_icecache(ps, icecache, upstream, ["--cache-max-bytes", "2GiB"])
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: get(f"{ice_url}{PATH}{i}", auth), range(10_000)))
        stats = json.loads(get(ice_admin + "/cache/stats")[2])
        rss = int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{ice_proc.pid}/status").read()).group(1)) * 1024
        cached = stats["bytes"]
        print("| entries | cached MiB | RSS MiB | RSS ÷ cached | target RSS ≤ 1.15 × cached + 30 MiB |")
        print("|---|---|---|---|---|")
        target = 1.15 * cached + 30 * 2**20
        print(f"| {stats['entries']} | {cached / 2**20:.1f} | {rss / 2**20:.1f} | {rss / cached:.3f} | "
              f"{'met' if rss <= target else 'NOT met'} ({target / 2**20:.1f} MiB) |")
    finally:
        ps.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
