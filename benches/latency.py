"""Sequential loadTable latency over one keep-alive connection, per target.

usage: latency.py N TOKEN PATH NAME=URL [NAME=URL ...]
Prints one row per target: p50 / p99 / mean in milliseconds and the x-cache values seen.
"""
import http.client
import statistics
import sys
import time
from collections import Counter
from urllib.parse import urlparse


def measure(url, path, token, n):
    parsed = urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port)
    headers = {"Authorization": f"Bearer {token}"}
    samples, outcomes = [], Counter()
    for _ in range(n):
        start = time.perf_counter()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        samples.append((time.perf_counter() - start) * 1000)
        if response.status != 200:
            sys.exit(f"{url}{path}: HTTP {response.status}")
        outcomes[response.getheader("x-cache", "-")] += 1
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99) - 1], statistics.mean(samples), outcomes


def main():
    n, token, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    print(f"{'target':<28} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}  x-cache")
    for target in sys.argv[4:]:
        name, url = target.split("=", 1)
        p50, p99, mean, outcomes = measure(url, path, token, n)
        seen = ", ".join(f"{k}x{v}" for k, v in sorted(outcomes.items()))
        print(f"{name:<28} {p50:>8.3f} {p99:>8.3f} {mean:>8.3f}  {seen}")


if __name__ == "__main__":
    main()
