"""Throughput bench of the Python client against a running daemon.

    SPILLWAY_SOCKET=/path/to/spillway.sock python3 -m spillway.bench

Prints one line per scenario:
``client=python scenario=<name> records=<N> seconds=<S> records_per_s=<R>``.
"""

import os
import sys
import time
from typing import Callable, List

from . import Tier, connect

RECORD = b"hello"  # 5 bytes


def serial_sync(path: str) -> int:
    n = 2000
    with connect(path) as c:
        push = c.push
        for _ in range(n):
            push(Tier.SYNC, RECORD)
    return n


def pipelined_sync_w64(path: str) -> int:
    n = 50000
    with connect(path) as c:
        with c.pipeline(window=64) as p:
            push = p.push
            for _ in range(n):
                push(Tier.SYNC, RECORD)
            outcomes = p.flush()
    if outcomes.count(1) != n:
        raise SystemExit("pipelined_sync_w64: not every push was acked")
    return n


def batch256_buffered(path: str) -> int:
    n = 2000000
    size = 256
    batch = [b"h%04d" % (i % 10000) for i in range(size)]  # 256 distinct 5-byte records
    full, rest = divmod(n, size)
    acked = 0
    with connect(path) as c:
        with c.pipeline(window=8) as p:
            push_batch = p.push_batch
            for _ in range(full):
                push_batch(Tier.BUFFERED, batch)
            if rest:
                push_batch(Tier.BUFFERED, batch[:rest])
            acked = sum(p.flush())
    if acked != n:
        raise SystemExit("batch256_buffered: %d of %d records acked" % (acked, n))
    return n


SCENARIOS: List[Callable[[str], int]] = [serial_sync, pipelined_sync_w64, batch256_buffered]


def main() -> None:
    path = os.environ.get("SPILLWAY_SOCKET")
    if not path:
        sys.exit("SPILLWAY_SOCKET is not set: set it to a running daemon's socket path")
    only = sys.argv[1:]
    for scenario in SCENARIOS:
        if only and scenario.__name__ not in only:
            continue
        start = time.perf_counter()
        records = scenario(path)
        seconds = time.perf_counter() - start
        print(
            "client=python scenario=%s records=%d seconds=%.3f records_per_s=%.0f"
            % (scenario.__name__, records, seconds, records / seconds),
            flush=True,
        )


if __name__ == "__main__":
    main()
