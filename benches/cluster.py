"""Several replicas on Redis beside the single process, loopback only, every run bounded in time.

  hits      warm loadTable hits (50 KB body): the single process without Redis, one replica,
            and three replicas with the load split over them; rounds alternate the set-ups,
            medians and spread; the goals are checked
  redis/hit Redis commands per hit with wrk paced to about 5,000 hits/s (INFO commandstats)
  writes    what the tier adds to a write (p99 of commits through one of three
            replicas beside the single process's), and the longest write with one replica killed
  stall     how long a small Redis command waits while another client moves values of a size
            (where the shared-entry cap belongs)

usage: python3 benches/cluster.py [--duration SECONDS] [--rounds N] [--connections N ...]
needs: cargo, wrk and redis-server (apt-get install wrk redis-server).
"""
import argparse
import http.client
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load import (PATH, ROOT, TOKEN, Processes, cargo_bench_binary, cpu_seconds, free_port,  # noqa: E402
                  get, release_icecache, start_fixture, start_icecache)


class Resp:
    """The least of a Redis client: one connection, commands in, replies parsed."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def send(self, *args):
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            parts += [f"${len(data)}\r\n".encode(), data, b"\r\n"]
        self.sock.sendall(b"".join(parts))
        return self.reply()

    def reply(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in (b"+", b":"):
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")


def redis_calls(port):
    info = Resp(port).send("INFO", "commandstats").decode()
    calls = {m.group(1): int(m.group(2)) for m in re.finditer(r"cmdstat_(\S+?):calls=(\d+)", info)}
    return sum(n for name, n in calls.items() if name not in ("info",))


def start_redis(ps):
    port = free_port()
    proc = ps.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no"])
    for _ in range(200):
        try:
            Resp(port).send("PING")
            return proc, port
        except OSError:
            time.sleep(0.02)
    sys.exit("redis-server did not start")


def wrk_many(targets, duration, connections, pids, pace_ms=None):
    """wrk against each URL at once (connections split between them); summed figures."""
    script = None
    if pace_ms is not None:
        script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
        script.write(f"function delay() return {pace_ms} end\n")
        script.close()
    per = max(1, connections // len(targets))
    threads = 2 if len(targets) == 1 else 1
    before = cpu_seconds(pids)
    runs = []
    for url in targets:
        args = ["wrk", f"-t{threads}", f"-c{per}", f"-d{duration}s", "--latency", "-H", f"Authorization: {TOKEN}"]
        if script:
            args += ["-s", script.name]
        runs.append(subprocess.Popen([*args, url + PATH], stdout=subprocess.PIPE, text=True))
    outs = [run.communicate()[0] for run in runs]
    cpu = sum(cpu_seconds(pids)) - sum(before)
    if script:
        os.unlink(script.name)
    requests = sum(int(re.search(r"(\d+) requests in", out).group(1)) for out in outs)
    errors = sum(int(m.group(1)) for out in outs for m in [re.search(r"Non-2xx or 3xx responses: (\d+)", out)] if m)
    return {"rps": sum(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)) for out in outs),
            "requests": requests, "cpu_us": cpu / max(requests, 1) * 1e6, "errors": errors}




def spread(values):
    return f"{statistics.median(values):.0f} ({min(values):.0f}–{max(values):.0f})"


def hits(ps, icecache, upstream, options):
    key = os.path.join(tempfile.mkdtemp(prefix="icecache-cluster-"), "key")
    with open(key, "wb") as f:
        f.write(os.urandom(32))
    redises = {}

    def tier(name, n, extra=()):
        """n replicas of one set-up on a Redis of their own, so that its commands are its own."""
        redises[name] = start_redis(ps)
        url = f"redis://127.0.0.1:{redises[name][1]}"
        return [["--redis-url", url, "--cluster-key-file", key, *extra]] * n

    setups = {
        "single process (no Redis)": [[]],
        "1 replica": tier("1 replica", 1),
        "3 replicas": tier("3 replicas", 3),
    }
    started = {}
    for name, flags in setups.items():
        procs = [start_icecache(ps, icecache, upstream, extra=["--credentials", "strip", *f]) for f in flags]
        for server in procs:
            get(server.url + PATH, {"Authorization": TOKEN})
        started[name] = procs
    for connections in options.connections:
        results = {name: [] for name in setups}
        for _ in range(options.rounds):
            for name, procs in started.items():
                pids = [s.proc.pid for s in procs] + ([redises[name][0].pid] if name in redises else [])
                result = wrk_many([s.url for s in procs], options.duration, connections, pids)
                assert result["errors"] == 0, (name, result)
                results[name].append(result)
        print(f"## Warm hits, 50 KB body, wrk -c{connections} in all: {options.rounds} alternating rounds "
              f"of {options.duration} s\n")
        print("| set-up | req/s median (min–max) | ÷ single process | CPU µs/req (icecache + Redis) |")
        print("|---|---|---|---|")
        base = statistics.median(r["rps"] for r in results["single process (no Redis)"])
        for name, runs in results.items():
            rps = [r["rps"] for r in runs]
            cpu = statistics.median(r["cpu_us"] for r in runs)
            print(f"| {name} | {spread(rps)} | {statistics.median(rps) / base:.2f} | {cpu:.1f} |")
        print()
        for name in ("1 replica", "3 replicas"):
            ratio = statistics.median(r["rps"] for r in results[name]) / base
            verdict = "met" if ratio >= 0.95 else "missed"
            print(f"goal, {name}, -c{connections}: at least 0.95 of the single process: {ratio:.2f}, {verdict}")
        print()

    print("## Redis commands per hit, wrk paced to about 5,000 hits/s\n")
    print("| set-up | hits/s achieved | Redis commands | per hit |")
    print("|---|---|---|---|")
    per_hit = {}
    for name in ("1 replica", "3 replicas"):
        procs = started[name]
        redis_port = redises[name][1]
        before = redis_calls(redis_port)
        # 64 connections, each waiting 10 ms after an answer before asking again: about
        # 5,000/s.
        result = wrk_many([s.url for s in procs], options.duration, 64, [], pace_ms=10)
        calls = redis_calls(redis_port) - before
        per_hit[name] = calls / max(result["requests"], 1)
        print(f"| {name} | {result['rps']:.0f} | {calls} | {per_hit[name]:.4f} |")
    ratio = per_hit["3 replicas"]
    print(f"\ngoal, 3 replicas: at most 0.01 Redis commands per hit: {ratio:.4f}, "
          f"{'met' if ratio <= 0.01 else 'missed'}\n")
    for procs in started.values():
        for server in procs:
            ps.stop(server.proc)
    for redis_proc, _ in redises.values():
        ps.stop(redis_proc)


COMMIT = b'{"requirements": [], "updates": []}'

def commit_latencies(url, n):
    """n commits one after the other on one keep-alive connection: milliseconds each."""
    host = url.split("//", 1)[1]
    connection = http.client.HTTPConnection(host, timeout=30)
    headers = {"Authorization": TOKEN, "Content-Type": "application/json"}
    out = []
    for _ in range(n):
        started = time.perf_counter()
        connection.request("POST", PATH, body=COMMIT, headers=headers)
        response = connection.getresponse()
        response.read()
        out.append((time.perf_counter() - started) * 1000)
        assert response.status == 200, response.status
    connection.close()
    return sorted(out)


def p99(values):
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def writes(ps, icecache, upstream, rounds, key):
    """Per round: the single process, a fresh tier of three, then that tier with
    its third replica killed (the first writes wait out its lease)."""
    n = 300
    rows = {"single process (no Redis)": [], "3 replicas": [], "3 replicas, one killed": []}
    for _ in range(rounds):
        single = start_icecache(ps, icecache, upstream, extra=["--credentials", "strip"])
        rows["single process (no Redis)"].append(commit_latencies(single.url, n))
        ps.stop(single.proc)
        redis_proc, port = start_redis(ps)
        flags = ["--credentials", "strip", "--redis-url", f"redis://127.0.0.1:{port}",
                 "--cluster-key-file", key]
        tier = [start_icecache(ps, icecache, upstream, extra=flags) for _ in range(3)]
        for server in tier:
            get(server.url + PATH, {"Authorization": TOKEN})
        rows["3 replicas"].append(commit_latencies(tier[0].url, n))
        tier[2].proc.kill()  # SIGKILL: no leaving, the others wait out its lease
        tier[2].proc.wait()
        rows["3 replicas, one killed"].append(commit_latencies(tier[0].url, n))
        for server in tier[:2]:
            ps.stop(server.proc)
        ps.stop(redis_proc)
    print(f"## Commits through one replica, {n} one after the other, {rounds} rounds (medians over rounds)\n")
    print("| set-up | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|")
    for name, runs in rows.items():
        med = lambda f: statistics.median(f(r) for r in runs)
        print(f"| {name} | {med(lambda r: r[len(r) // 2]):.2f} | {med(p99):.2f} | {med(lambda r: r[-1]):.1f} |")
    added = statistics.median(p99(t) - p99(s) for t, s in zip(rows["3 replicas"],
                                                              rows["single process (no Redis)"]))
    print(f"\ngoal, a write's added p99 with every replica healthy at most 3 ms: {added:.2f} ms, "
          f"{'met' if added <= 3 else 'missed'}")
    longest = max(r[-1] for r in rows["3 replicas, one killed"])
    print(f"goal, the longest write with one replica killed at most a lease plus 50 ms (1050 ms): "
          f"{longest:.0f} ms, {'met' if longest <= 1050 else 'missed'}\n")


def stall(ps, duration):
    redis_proc, port = start_redis(ps)
    print("\n## A small command's wait while another client moves values of a size\n")
    print("| value | SET+GET pairs | PING p50 ms | PING p99 ms | PING max ms |")
    print("|---|---|---|---|---|")
    for size in (64 << 10, 1 << 20, 4 << 20, 8 << 20, 16 << 20):
        value = os.urandom(size)
        stop = threading.Event()
        pairs = [0]

        def mover():
            client = Resp(port)
            while not stop.is_set():
                client.send("SET", "big", value)
                client.send("GET", "big")
                pairs[0] += 1

        thread = threading.Thread(target=mover)
        thread.start()
        probe, waits = Resp(port), []
        deadline = time.time() + duration
        while time.time() < deadline:
            started = time.perf_counter()
            probe.send("PING")
            waits.append((time.perf_counter() - started) * 1000)
            time.sleep(0.001)
        stop.set()
        thread.join()
        waits.sort()
        print(f"| {size >> 10} KiB | {pairs[0]} | {waits[len(waits) // 2]:.2f} | "
              f"{waits[int(len(waits) * 0.99)]:.2f} | {waits[-1]:.2f} |")
    ps.stop(redis_proc)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, nargs="+", default=[48, 512])
    options = parser.parse_args()
    for tool in ["wrk", "redis-server", "cargo"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install wrk redis-server")
    fixture = cargo_bench_binary("fixture_server")
    icecache = release_icecache()
    workdir = tempfile.mkdtemp(prefix="icecache-bench-")
    body = os.path.join(workdir, "50k.json")
    subprocess.run([sys.executable, os.path.join(ROOT, "benches/make_metadata.py"), "51200", body], check=True)
    ps = Processes()
    try:
        print(f"# {os.cpu_count()} cores; HTTP/1.1 keep-alive; icecache --credentials strip, fresh_for 1h\n")
        _, upstream = start_fixture(ps, fixture, body, '"fixture-v1"')
        hits(ps, icecache, upstream, options)
        key = os.path.join(workdir, "cluster.key")
        with open(key, "wb") as f:
            f.write(os.urandom(32))
        writes(ps, icecache, upstream, options.rounds, key)
        stall(ps, min(options.duration, 5))
    finally:
        ps.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
