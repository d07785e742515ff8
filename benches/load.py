"""Load benchmark: icecache beside nginx and Varnish, each configured as its users run it,
in one run, loopback only, every load bounded in time.

  fixture   the upstream: a minimal hyper server answering the body from memory (also
            measured directly, as a reference with no cache in front)
  icecache  in front of the fixture (release build, `--log-level warn`: no access log)
  nginx     proxy_cache with `sendfile on; tcp_nopush on;`, keepalive to the upstream,
            access_log off (Debian's defaults plus the cache)
  varnish   malloc storage, `vcl_hash` on Authorization and X-Iceberg-Access-Delegation
  floor     (hit and 304 rows) `benches/floor_server.rs`: thread per core, finds where
            each request head ends and writes fixed bytes; no parsing, no cache. The least a
            keep-alive server can spend here, so the ceiling of any ratio to nginx; and the
            same answers through hyper's HTTP/1.1 server with a trivial service, the floor
            of any server built on hyper

Rows: cache hits of 5 KB, 50 KB and 2 MB bodies over HTTP/1.1; the local 304; a 50 KB hit over
TLS 1.3 (ECDSA P-256) with HTTP/1.1 and with HTTP/2; a herd of 500 cold loads; memory at 10k
entries. Every row alternates the servers across ROUNDS rounds (the order rotates each round)
and reports the median with min-max, and CPU per request read from /proc (the server's
processes only; the load generator is not counted).

usage: python3 benches/load.py [--duration S] [--rounds N] [--connections N] [--docs]
                              [--only ROW[,ROW...]]
  --docs    writes the results into docs/performance.md between the load-benchmark markers
            (--readme is the same flag under its old name)
  --only    runs only these rows (5k, 50k, 304, 2m, tls, herd, memory), for work in progress;
            the docs are only ever written from a whole run
needs: cargo, wrk, h2load, nginx, varnishd, openssl:
  apt-get install wrk nghttp2-client nginx-light varnish openssl
and valgrind for the instruction count of the 304 goal (without it that goal is "NOT met"):
the goals table at the top judges every row of issue #29 from this run.
"""
import argparse
import concurrent.futures
import json
import os
import platform
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "Bearer benchmark-token"
PATH = "/v1/warehouse/namespaces/db/tables/events"
AUTH = {"Authorization": TOKEN}
FIXTURE_ETAG = '"fixture-v1"'
TICKS = os.sysconf("SC_CLK_TCK")
BEGIN, END = "<!-- benches/load.py: begin -->", "<!-- benches/load.py: end -->"


HYPER_FLOOR, FIXED_FLOOR = "floor through hyper", "floor (fixed bytes)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, headers=None):
    context = ssl._create_unverified_context()
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def wait_for(url, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            get(url)
            return
        except Exception:
            time.sleep(0.05)
    sys.exit(f"{url} did not answer")


def cpu_seconds(pids):
    """User and kernel CPU seconds of `pids` so far."""
    user = kernel = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            kernel += int(fields[12])
        except FileNotFoundError:
            pass
    return user / TICKS, kernel / TICKS


def tree(pid):
    """The process and all its descendants (nginx workers, Varnish's child)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        out = subprocess.run(["pgrep", "-P", str(p)], capture_output=True, text=True).stdout
        todo += [int(c) for c in out.split()]
    return pids


def rss_bytes(pid):
    return int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1)) * 1024


class Processes:
    def __init__(self):
        self.procs = []

    def start(self, args, **kwargs):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
        self.procs.append(proc)
        return proc

    def stop(self, proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def stop_all(self):
        for proc in reversed(self.procs):
            self.stop(proc)


# ---- load generators -------------------------------------------------------------------

def run_wrk(url, headers, duration, connections):
    args = ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", url]
    for name, value in headers.items():
        args += ["-H", f"{name}: {value}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=duration + 30).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return requests, (int(errors.group(1)) if errors else 0) + (1 if socket_errors else 0)


def run_h2load(url, headers, duration, connections):
    args = ["h2load", "-t2", f"-c{connections}", "-m1", f"-D{duration}", url]
    for name, value in headers.items():
        args += ["-H", f"{name}: {value}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=duration + 30).stdout
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored", out)
    if not m:
        sys.exit(f"h2load printed no totals:\n{out}")
    protocol = re.search(r"Application protocol: (\S+)", out)
    if not protocol or protocol.group(1) != "h2":
        sys.exit(f"h2load did not speak h2 to {url}:\n{out}")
    done, succeeded = int(m.group(2)), int(m.group(3))
    return done, done - succeeded + int(m.group(4)) + int(m.group(5))


def measure(generator, server, url, headers, duration, connections):
    pids = tree(server.proc.pid)
    before, started = cpu_seconds(pids), time.monotonic()
    requests, errors = generator(url, headers, duration, connections)
    elapsed = time.monotonic() - started
    after = cpu_seconds(pids)
    per_request = 1e6 / max(requests, 1)
    user, kernel = (after[0] - before[0]) * per_request, (after[1] - before[1]) * per_request
    return {"rps": requests / elapsed, "cpu_us": user + kernel, "user_us": user, "kernel_us": kernel,
            "errors": errors}


# ---- servers ---------------------------------------------------------------------------

class Server:
    def __init__(self, name, proc, url, tls_url=None):
        self.name, self.proc, self.url, self.tls_url = name, proc, url, tls_url


def start_fixture(ps, fixture, body, etag, delay_ms=0):
    port = free_port()
    proc = ps.start([fixture, f"127.0.0.1:{port}", body, etag, str(delay_ms)])
    wait_for(f"http://127.0.0.1:{port}/__count")
    return Server("fixture (no cache)", proc, f"http://127.0.0.1:{port}"), port


def start_floor(ps, floor, body, through_hyper=False):
    port = free_port()
    proc = ps.start([floor, f"127.0.0.1:{port}", body, FIXTURE_ETAG, *(["hyper"] if through_hyper else [])])
    wait_for(f"http://127.0.0.1:{port}/")
    name = HYPER_FLOOR if through_hyper else FIXED_FLOOR
    return Server(name, proc, f"http://127.0.0.1:{port}")


def icecache_args(icecache, upstream, port, admin, tls):
    args = [icecache, "--upstream", f"http://127.0.0.1:{upstream}", "--listen", f"127.0.0.1:{port}",
            "--admin-listen", f"127.0.0.1:{admin}", "--log-level", "warn", "--fresh-for", "1h"]
    if tls:
        args += ["--tls-cert", tls["cert"], "--tls-key", tls["key"]]
    return args


def start_icecache(ps, icecache, upstream, tls=None, extra=()):
    port, admin = free_port(), free_port()
    proc = ps.start([*icecache_args(icecache, upstream, port, admin, tls), *extra])
    wait_for(f"http://127.0.0.1:{admin}/healthz")
    scheme = "https" if tls else "http"
    server = Server("icecache", proc, f"{scheme}://127.0.0.1:{port}")
    server.admin = f"http://127.0.0.1:{admin}"
    return server


NGINX_CONF = """{user}
worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    access_log off;
    ssl_protocols TLSv1.3;
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=tables:64m max_size=4g inactive=1h use_temp_path=off;
    upstream fixture {{ server 127.0.0.1:{upstream}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        listen 127.0.0.1:{tls_port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{
            proxy_pass http://fixture;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache tables;
            proxy_cache_key "$request_method$request_uri$http_authorization$http_x_iceberg_access_delegation";
            proxy_cache_valid 200 1h;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 30s;
            proxy_buffers 64 64k;
        }}
    }}
}}
"""

VARNISH_VCL = """vcl 4.1;
backend fixture { .host = "127.0.0.1"; .port = "%(upstream)d"; }
sub vcl_recv {
    # Varnish passes requests that carry Authorization by default; these are cacheable per caller.
    if (req.method == "GET" || req.method == "HEAD") { return (hash); }
}
sub vcl_hash {
    hash_data(req.http.Authorization);
    hash_data(req.http.X-Iceberg-Access-Delegation);
}
sub vcl_backend_response { set beresp.ttl = 1h; }
"""


def start_nginx(ps, workdir, upstream, tls):
    port, tls_port = free_port(), free_port()
    directory = os.path.join(workdir, f"nginx-{port}")
    os.makedirs(os.path.join(directory, "cache"))
    conf = os.path.join(directory, "nginx.conf")
    # As root, workers would switch to an unprivileged user that cannot write the cache dir.
    user = "user root;" if os.geteuid() == 0 else ""
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(user=user, dir=directory, upstream=upstream, port=port,
                                  tls_port=tls_port, cert=tls["cert"], key=tls["key"]))
    proc = ps.start(["nginx", "-c", conf, "-g", "daemon off;"])
    wait_for(f"http://127.0.0.1:{port}/__count")
    return Server("nginx", proc, f"http://127.0.0.1:{port}", f"https://127.0.0.1:{tls_port}")


def start_varnish(ps, workdir, upstream):
    port = free_port()
    directory = os.path.join(workdir, f"varnish-{port}")
    os.makedirs(directory)
    vcl = os.path.join(directory, "default.vcl")
    with open(vcl, "w") as f:
        f.write(VARNISH_VCL % {"upstream": upstream})
    jail = ["-j", "none"] if os.geteuid() == 0 else []
    proc = ps.start(["varnishd", "-F", *jail, "-n", directory, "-a", f"127.0.0.1:{port}",
                     "-T", "none", "-f", vcl, "-s", "malloc,4G"])
    wait_for(f"http://127.0.0.1:{port}/__count")
    return Server("varnish", proc, f"http://127.0.0.1:{port}")


def make_cert(workdir):
    cert, key = os.path.join(workdir, "cert.pem"), os.path.join(workdir, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return {"cert": cert, "key": key}


# ---- rows ------------------------------------------------------------------------------

def upstream_count(port):
    return int(get(f"http://127.0.0.1:{port}/__count")[2])


def row(title, servers, target, generator, headers, options, connections, upstream_port):
    """One row: every server measured `rounds` times, alternating, the order rotating."""
    results = {s.name: [] for s in servers}
    for s in servers:  # warm the cache and the connections; not measured
        measure(generator, s, target(s), headers, 1, connections)
    before = upstream_count(upstream_port)
    for r in range(options.rounds):
        order = servers[r % len(servers):] + servers[:r % len(servers)]
        for s in order:
            results[s.name].append(measure(generator, s, target(s), headers, options.duration, connections))
    fixture_measured = any(s.name.startswith("fixture") for s in servers)
    fetched = None if fixture_measured else upstream_count(upstream_port) - before
    return {"title": title, "results": results, "fetched": fetched, "connections": connections}


def summary(runs, field):
    values = [run[field] for run in runs]
    return statistics.median(values), min(values), max(values)


def render_row(row_result):
    lines = [f"#### {row_result['title']} (-c{row_result['connections']})", "",
             "| server | req/s median (min-max) | CPU µs/req median (min-max) | of which user / kernel (medians) | errors | icecache ÷ this (req/s) | this CPU ÷ icecache CPU |",
             "|---|---|---|---|---|---|---|"]
    results = row_result["results"]
    ice_rps = summary(results["icecache"], "rps")[0]
    ice_cpu = summary(results["icecache"], "cpu_us")[0]
    for name, runs in results.items():
        rps, rps_lo, rps_hi = summary(runs, "rps")
        cpu, cpu_lo, cpu_hi = summary(runs, "cpu_us")
        errors = sum(run["errors"] for run in runs)
        ratio = "" if name == "icecache" else f"{ice_rps / rps:.2f}"
        cpu_ratio = "" if name == "icecache" else f"{cpu / ice_cpu:.2f}"
        user, kernel = summary(runs, "user_us")[0], summary(runs, "kernel_us")[0]
        lines.append(f"| {name} | {rps:,.0f} ({rps_lo:,.0f}-{rps_hi:,.0f}) | {cpu:.1f} ({cpu_lo:.1f}-{cpu_hi:.1f}) "
                     f"| {user:.1f} / {kernel:.1f} | {errors} | {ratio} | {cpu_ratio} |")
    if row_result["fetched"] is not None:
        lines.append("")
        lines.append(f"Catalog (fixture) requests during the measured rounds: {row_result['fetched']}.")
    return "\n".join(lines)


def herd(ps, fixture, workdir, body, icecache, tls):
    lines = ["#### Herd: 500 concurrent cold loads of one table (the fixture answers after 300 ms)", "",
             "| server | catalog requests | slowest answer ms |", "|---|---|---|"]
    for name in ("icecache", "nginx", "varnish"):
        upstream_server, upstream = start_fixture(ps, fixture, body, FIXTURE_ETAG, 300)
        if name == "icecache":
            server = start_icecache(ps, icecache, upstream)
        elif name == "nginx":
            server = start_nginx(ps, workdir, upstream, tls)
        else:
            server = start_varnish(ps, workdir, upstream)
        before = upstream_count(upstream)  # readiness probes may have asked once
        herd_path = PATH.replace("events", "herd")
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(500) as pool:
            statuses = list(pool.map(lambda _: get(server.url + herd_path, AUTH)[0], range(500)))
        slowest = (time.monotonic() - started) * 1000
        if any(s != 200 for s in statuses):
            sys.exit(f"{name}: herd statuses {sorted(set(statuses))}")
        lines.append(f"| {name} | {upstream_count(upstream) - before} | {slowest:.0f} |")
        ps.stop(server.proc)
        ps.stop(upstream_server.proc)
    return "\n".join(lines)


def memory(ps, fixture, icecache, workdir):
    lines = ["#### icecache memory at 10k entries", "",
             "| body | entries | cached MiB | RSS MiB | RSS ÷ cached | goal: RSS ≤ 1.15 × cached + 30 MiB |",
             "|---|---|---|---|---|---|"]
    for label, size in (("5 KB", 5 * 1024), ("50 KB", 50 * 1024)):
        body = make_body(workdir, size)
        upstream_server, upstream = start_fixture(ps, fixture, body, FIXTURE_ETAG)
        server = start_icecache(ps, icecache, upstream, extra=["--cache-max-bytes", "2GiB"])
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: get(f"{server.url}{PATH}{i}", AUTH), range(10_000)))
        stats = json.loads(get(server.admin + "/cache/stats")[2])
        rss, cached = rss_bytes(server.proc.pid), stats["bytes"]
        goal = 1.15 * cached + 30 * 2**20
        lines.append(f"| {label} | {stats['entries']} | {cached / 2**20:.1f} | {rss / 2**20:.1f} | "
                     f"{rss / cached:.2f} | {'met' if rss <= goal else 'NOT met'} ({goal / 2**20:.1f} MiB) |")
        ps.stop(server.proc)
        ps.stop(upstream_server.proc)
    return "\n".join(lines)


def make_body(workdir, size):
    path = os.path.join(workdir, f"body-{size}.json")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "benches/make_metadata.py"), str(size), path], check=True)
    return path


def cargo_bench_binary(name):
    out = subprocess.run(["cargo", "bench", "--bench", name, "--no-run", "--message-format=json"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        message = json.loads(line)
        if message.get("executable") and message.get("target", {}).get("name") == name:
            return message["executable"]
    sys.exit(f"no binary for bench {name}")


def release_icecache():
    """icecache as `cargo build --release` makes it for users. Call it after the bench binaries:
    building those builds icecache again with the dev-dependencies' features (tokio's test clock)
    and leaves that build at target/release/icecache, which this one then replaces."""
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target/release/icecache")


def versions():
    def first_line(args):
        out = subprocess.run(args, capture_output=True, text=True)
        return (out.stdout + out.stderr).strip().splitlines()[0]
    cpu = re.search(r"model name\s*:\s*(.*)", open("/proc/cpuinfo").read())
    return [
        f"{os.cpu_count()} cores ({cpu.group(1) if cpu else platform.machine()}), Linux {platform.release()}",
        first_line(["nginx", "-v"]), first_line(["varnishd", "-V"]), first_line(["wrk", "-v"]),
        first_line(["h2load", "--version"]),
    ]


def bench_body(workdir, size, label, options, ps, icecache, fixture, tls, with_varnish=True):
    body = make_body(workdir, size)
    fixture_server, upstream = start_fixture(ps, fixture, body, FIXTURE_ETAG)
    servers = [start_icecache(ps, icecache, upstream), start_nginx(ps, workdir, upstream, tls)]
    if with_varnish:
        servers.append(start_varnish(ps, workdir, upstream))
    return fixture_server, upstream, servers


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--docs", "--readme", dest="docs", action="store_true")
    parser.add_argument("--only", type=lambda v: set(v.split(",")), default=None)
    options = parser.parse_args()
    if options.rounds < 3:
        sys.exit("--rounds must be at least 3")
    rows = {"5k", "50k", "304", "2m", "tls", "herd", "memory"}
    if options.only is not None and (options.docs or not options.only <= rows):
        sys.exit(f"--only takes rows of {sorted(rows)}, and never with --docs")
    wanted = lambda name: options.only is None or name in options.only
    for tool in ["wrk", "h2load", "nginx", "varnishd", "openssl", "cargo"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install wrk nghttp2-client nginx-light varnish openssl")
    fixture = cargo_bench_binary("fixture_server")
    floor = cargo_bench_binary("floor_server")
    icecache = release_icecache()
    workdir = tempfile.mkdtemp(prefix="icecache-bench-")
    ps = Processes()
    c, sections, measured = options.connections, [], {}
    started = time.strftime("%Y-%m-%d")
    try:
        tls = make_cert(workdir)
        plain = lambda s: s.url + PATH
        for size, label, name in ((5 * 1024, "5 KB", "5k"), (50 * 1024, "50 KB", "50k"),
                                  (2 * 1024 * 1024, "2 MB", "2m")):
            if not (wanted(name) or (name == "50k" and wanted("304"))):
                continue
            fixture_server, upstream, servers = bench_body(workdir, size, label, options, ps, icecache, fixture, tls)
            connections = c if size < 1024 * 1024 else min(c, 16)
            servers.append(start_floor(ps, floor, make_body(workdir, size)))
            servers.append(start_floor(ps, floor, make_body(workdir, size), through_hyper=True))
            if wanted(name):
                measured[name] = row(f"{label} body, cache hit, HTTP/1.1", servers, plain, run_wrk, AUTH, options,
                                     connections, upstream)
                sections.append(render_row(measured[name]))
                print(sections[-1] + "\n", flush=True)
            if size == 50 * 1024 and wanted(name):
                # The reference: the fixture itself, no cache in front.
                sections.append(render_row(row(f"{label} body, the fixture directly (no cache, reference)",
                                               [servers[0], fixture_server], plain, run_wrk, AUTH, options, c,
                                               upstream)))
                print(sections[-1] + "\n", flush=True)
            if size == 50 * 1024 and wanted("304"):
                etags = {s.name: get(plain(s), AUTH)[1].get("ETag") for s in servers}
                for s in servers:
                    status = get(plain(s), {**AUTH, "If-None-Match": etags[s.name]})[0]
                    if status != 304:
                        sys.exit(f"{s.name} answered {status} to its own ETag")
                # Each server is asked with the ETag it gave; wrk sends one header set, so the
                # ETag-specific rows run one server at a time, still alternating by round.
                measured["304"] = row_per_server(f"{label} body, local 304", servers, etags, options, c, upstream)
                sections.append(render_row(measured["304"]))
                print(sections[-1] + "\n", flush=True)
            for s in servers:
                ps.stop(s.proc)
            ps.stop(fixture_server.proc)

        body = make_body(workdir, 50 * 1024)
        if wanted("tls"):
            fixture_server, upstream = start_fixture(ps, fixture, body, FIXTURE_ETAG)
            servers = [start_icecache(ps, icecache, upstream, tls=tls), start_nginx(ps, workdir, upstream, tls)]
            secure = lambda s: (s.tls_url or s.url) + PATH
            measured["tls-h1"] = row("50 KB body, cache hit, TLS 1.3 (ECDSA P-256), HTTP/1.1", servers, secure,
                                     run_wrk, AUTH, options, c, upstream)
            sections.append(render_row(measured["tls-h1"]))
            print(sections[-1] + "\n", flush=True)
            measured["tls-h2"] = row("50 KB body, cache hit, TLS 1.3 (ECDSA P-256), HTTP/2 (h2load -m1)", servers,
                                     secure, run_h2load, AUTH, options, c, upstream)
            sections.append(render_row(measured["tls-h2"]))
            print(sections[-1] + "\n", flush=True)
            for s in servers:
                ps.stop(s.proc)
            ps.stop(fixture_server.proc)

        if wanted("herd"):
            sections.append(herd(ps, fixture, workdir, body, icecache, tls))
            print(sections[-1] + "\n", flush=True)
        if wanted("memory"):
            sections.append(memory(ps, fixture, icecache, workdir))
            print(sections[-1] + "\n", flush=True)
    finally:
        ps.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    if measured:
        sections.insert(0, goals(measured, instructions() if wanted("304") else None))
        print(sections[0] + "\n", flush=True)
    if options.docs:
        write_docs(started, options, sections)


def instructions():
    """Instructions per local 304 (callgrind, `benches/instructions.sh`): icecache's, and the
    floor through hyper's. None when valgrind is missing (the goal is then not judged)."""
    if not shutil.which("valgrind"):
        return None
    counts = {}
    for floor in ("", "hyper"):
        out = subprocess.run(["bash", "benches/instructions.sh", "304", "2000"], cwd=ROOT, check=True,
                             capture_output=True, text=True, env={**os.environ, "FLOOR": floor}).stdout
        found = re.search(r"([0-9]+) instructions/request", out)
        if not found:
            sys.exit(f"benches/instructions.sh printed no count: {out!r}")
        counts[floor or "icecache"] = int(found.group(1))
    return counts


def goals(measured, counts):
    """Issue #29's goals, each judged from this run: icecache's median req/s (and CPU) against
    the floors', nginx's and Varnish's medians in the same row."""
    median = lambda row_result, name, field="rps": summary(row_result["results"][name], field)[0]
    lines = ["#### Goals, judged from this run (medians)", "",
             "| row | icecache req/s | ÷ floor through hyper | ÷ fixed floor | ÷ nginx | ÷ Varnish | goal | |",
             "|---|---|---|---|---|---|---|---|"]

    def line(key, goal, met):
        row_result = measured.get(key)
        if row_result is None:
            return
        ice = median(row_result, "icecache")
        ratio = lambda name: (f"{ice / median(row_result, name):.2f}" if name in row_result["results"] else "")
        lines.append(f"| {row_result['title']} | {ice:,.0f} | {ratio(HYPER_FLOOR)} | {ratio(FIXED_FLOOR)} | "
                     f"{ratio('nginx')} | {ratio('varnish')} | {goal} | {'met' if met(row_result, ice) else 'NOT met'} |")

    of = lambda name, at_least: lambda r, ice: ice >= at_least * median(r, name)
    if counts is not None:
        own = counts["icecache"] - counts["hyper"]
        instructions_met = own <= 8000
        note = f"; {counts['icecache']:,} instructions per 304, {own:,} beyond the floor through hyper's {counts['hyper']:,}"
    else:
        instructions_met, note = False, "; instructions not measured (no valgrind)"
    line("304", f"≥ 0.85 of the floor through hyper and ≤ 8,000 instructions beyond it{note}",
         lambda r, ice: of(HYPER_FLOOR, 0.85)(r, ice) and instructions_met)
    line("50k", "≥ 0.90 of the floor through hyper, CPU per request ≤ nginx's",
         lambda r, ice: of(HYPER_FLOOR, 0.90)(r, ice)
         and median(r, "icecache", "cpu_us") <= median(r, "nginx", "cpu_us"))
    line("5k", "≥ 0.85 of the floor through hyper", of(HYPER_FLOOR, 0.85))
    line("2m", "≥ 0.95 of the fixed floor", of(FIXED_FLOOR, 0.95))
    line("tls-h1", "≥ 1.3 × nginx", of("nginx", 1.3))
    line("tls-h2", "≥ 1.3 × nginx", of("nginx", 1.3))
    return "\n".join(lines)


def row_per_server(title, servers, etags, options, connections, upstream_port):
    results = {s.name: [] for s in servers}
    headers = lambda s: {**AUTH, "If-None-Match": etags[s.name]}
    for s in servers:
        measure(run_wrk, s, s.url + PATH, headers(s), 1, connections)
    before = upstream_count(upstream_port)
    for r in range(options.rounds):
        order = servers[r % len(servers):] + servers[:r % len(servers)]
        for s in order:
            results[s.name].append(measure(run_wrk, s, s.url + PATH, headers(s), options.duration, connections))
    return {"title": title, "results": results, "fetched": upstream_count(upstream_port) - before,
            "connections": connections}


def write_docs(day, options, sections):
    setup = "\n".join(f"- {line}" for line in versions())
    vcl = VARNISH_VCL % {"upstream": 0}
    nginx = NGINX_CONF.format(user="", dir="DIR", upstream="UPSTREAM", port="PORT", tls_port="TLS_PORT",
                              cert="cert.pem", key="key.pem")
    text = f"""{BEGIN}
Written by `python3 benches/load.py --docs` on {day} from one run (never edited by hand):
{options.rounds} alternating rounds of {options.duration} s per server and row, wrk -t2 (h2load -t2
for HTTP/2), servers and load generator sharing the machine:
{setup}

{(chr(10) * 2).join(sections)}

The floor (`benches/floor_server.rs`, on every hit and 304 row) is thread per core like icecache
and only finds where each request head ends before it writes fixed bytes: no parsing, no
routing, no cache, no header built. No HTTP server spends less per request on this machine, so
its ratio to nginx bounds the ratio any server can reach here. The floor through hyper answers
the same through hyper's HTTP/1.1 server (the same runtimes, a trivial service, hyper's `Date`
and `content-length`): the least any server built on hyper, icecache included, can spend.

icecache ran as `icecache --upstream http://127.0.0.1:UPSTREAM --listen … --log-level warn
--fresh-for 1h` (plus `--tls-cert`/`--tls-key` for the TLS rows). nginx ran with:

```nginx
{nginx.strip()}
```

Varnish ran as `varnishd -F -n DIR -a 127.0.0.1:PORT -T none -f default.vcl -s malloc,4G` with:

```vcl
{vcl.strip()}
```
{END}"""
    docs = os.path.join(ROOT, "docs", "performance.md")
    content = open(docs).read()
    if BEGIN not in content or END not in content:
        sys.exit("docs/performance.md has no load-benchmark markers")
    head, rest = content.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(docs, "w") as f:
        f.write(head + text + tail)


if __name__ == "__main__":
    main()
