"""How fast the Continuous training page answers with a long history.

Starts Airflow standalone in a scratch home, posts N cycles of asset events through the REST
API (``ctpipe.ui.sample``), then loads ``/ctpipe/`` as a logged-in user L times and prints
the median and 95th percentile of the full response time. The last line is exactly
``ui_p50_ms=<x> ui_p95_ms=<x> cycles=<n>``.

    python bench/ui.py [--cycles 200] [--loads 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import socket
import tempfile
import time

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--loads", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctpipe-ui-bench-") as home:
        os.environ.update({"CTPIPE_HOME": home, "CTPIPE_AIRFLOW_PORT": str(free_port()), "CTPIPE_TRACE_SCHEDULE": ""})
        from ctpipe.airflow_local import LocalAirflow
        from ctpipe.config import Settings
        from ctpipe.ui.sample import post_history

        af = LocalAirflow(Settings())
        af.start()
        try:
            af.wait_ready()
            t0 = time.perf_counter()
            post_history(af.client, args.cycles)
            print(f"posted {args.cycles} cycles ({3 * args.cycles} asset events) in {time.perf_counter() - t0:.1f} s")
            cookies = {"_token": af.client.token()}
            t = time.perf_counter()
            first = requests.get(f"{af.url}/ctpipe/", cookies=cookies, timeout=60)
            first.raise_for_status()
            # The first load reads the whole history (later ones only what is new) and opens MLflow.
            print(f"first load: {(time.perf_counter() - t) * 1000:.0f} ms")
            assert first.text.count('<tr class="cycle">') == min(50, args.cycles), "the page does not show the history"
            times = []
            for _ in range(args.loads):
                t = time.perf_counter()
                r = requests.get(f"{af.url}/ctpipe/", cookies=cookies, timeout=60)
                times.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
            p50 = statistics.median(times)
            p95 = statistics.quantiles(times, n=20, method="inclusive")[18]
            print(f"{args.loads} loads of /ctpipe/ ({len(first.content) / 1024:.0f} KiB): "
                  f"min {min(times):.0f} ms, median {p50:.0f} ms, p95 {p95:.0f} ms, max {max(times):.0f} ms")
            print(f"ui_p50_ms={p50:.0f} ui_p95_ms={p95:.0f} cycles={args.cycles}")
        finally:
            af.stop()


if __name__ == "__main__":
    main()
