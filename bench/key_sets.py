"""The main process's duplicate-key sets at sizes the other benches never reach.

Usage:
    python bench/key_sets.py [--alone 40000000] [--filled 26814400] [--traces 1000000]
                             [--dir /tmp/ctpipe-bench-formats]

The main process keeps three key sets (trace ids, exact and normalized contents). Each moves its
keys to disk as a sorted run every 1,048,576 keys and merges its runs once their filters outgrow
their budget, first at about seventeen million keys, so a million-trace run never shows what a
run of tens of millions holds. Two measurements:

* The sets alone, in this process: ``--alone`` traces' keys (random, in parts of 2,600, as the
  workers' parts bring them), with a line per five million traces: the process's RSS, its peak
  since the line before (the kernel's high-water mark, imports included) and the CPU seconds a
  million traces' lookups took.
* Whole runs, side by side: ``bench/formats.py``'s Langfuse export of ``--traces`` generations (the
  format closest to the 1 GB bound; written first if missing), once as it is and once with each set
  holding ``--filled`` random keys before the first block, as a run that far into a source of that
  many traces would have them. The default, 25 runs and 600,000 keys, has the sets write their 26th
  run during the run, and merge.

Last line: ``alone_peak_rss_mb=<a> peak_rss_mb=<b> filled_peak_rss_mb=<c> filled_time_ratio=<d>``
(``d``: the filled run's time, less the filling, over the plain run's). Run it while nothing else
loads the machine.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import formats
from materialize import _own_peak_mb, _status_kb, arguments, run_child

PART = 2600  # traces of a bench part


def _reset_peak() -> None:
    """Start this process's peak RSS (VmHWM) again from its RSS now (Linux 4.0 on)."""
    Path("/proc/self/clear_refs").write_text("5")


def alone(traces: int, spill_dir: str) -> float:
    """Feed the three sets ``traces`` traces' keys; the peak RSS."""
    import numpy as np

    from ctpipe.materialize import _Dedup

    sets, rng = _Dedup(spill_dir), np.random.default_rng(0)
    done, last, cpu, overall = 0, 0, time.process_time(), 0.0
    while done < traces:
        n = min(PART, traces - done)
        sets.verdicts({name: rng.integers(1, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
                       for name in ("id_key", "exact_key", "norm_key")})
        done += n
        if done % 5_000_000 < PART or done == traces:
            peak, spent, cpu = _own_peak_mb(), time.process_time() - cpu, time.process_time()
            millions, last, overall = (done - last) / 1e6, done, max(overall, peak)
            _reset_peak()
            print(f"{done / 1e6:6.1f}M traces  RSS {_status_kb('self', 'VmRSS') / 1024:4.0f} MB "
                  f"({_status_kb('self', 'RssFile') / 1024:3.0f} file-backed), peak {peak:4.0f}  "
                  f"{spent / millions:4.1f} CPU s a million", flush=True)
    return overall


def child(kind: str, src: Path, out: Path, filled: int) -> None:
    from ctpipe import materialize

    filling = [0.0]
    if kind == "filled":
        import numpy as np

        make = materialize._Dedup.__init__

        def fill(self, spill_dir: str, **keyset) -> None:
            make(self, spill_dir, **keyset)
            started, rng = time.perf_counter(), np.random.default_rng(0)
            for keys in (self.ids, self.exact, self.norm):
                for at in range(0, filled, 1 << 20):  # a run's worth at a time, as a real run fills them
                    keys.add(rng.integers(1, 2**64 - 1, min(1 << 20, filled - at), dtype=np.uint64, endpoint=True))
            filling[0] = time.perf_counter() - started

        materialize._Dedup.__init__ = fill
    result = formats.materialize_format(src, out)
    result["seconds"] -= filling[0]
    result["filling_s"] = filling[0]
    print("RESULT " + json.dumps(result))


def main() -> None:
    args = arguments(__doc__, 1_000_000, "/tmp/ctpipe-bench-formats", ["plain", "filled"], alone=40_000_000,
                     filled=25 * (1 << 20) + 600_000)
    if args.child:
        child(args.child, args.src, args.out, args.filled)
        return
    print(f"the key sets alone, {args.alone:,} traces' keys:", flush=True)
    args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as spill_dir:  # the sets' runs: 8 bytes a key
        alone_peak = alone(args.alone, spill_dir)
    root = formats.written(args.dir, args.traces)
    runs = {}
    for kind in ("plain", "filled"):
        runs[kind] = r = run_child(__file__, kind, root / "langfuse", args.dir / "out-key-sets", "--filled",
                                   str(args.filled))
        if r["counts"]["traces"] != args.traces:
            sys.exit(f"{kind}: {r['counts']['traces']} of {args.traces} traces kept: {r['counts']}")
        sets = f"filled with {args.filled:,} keys each in {r['filling_s']:.1f} s" if kind == "filled" else "empty"
        print(f"Langfuse, {args.traces:,} generations, key sets {sets}: {r['seconds']:.1f} s, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    print(f"alone_peak_rss_mb={alone_peak:.0f} peak_rss_mb={runs['plain']['peak_rss_mb']:.0f} "
          f"filled_peak_rss_mb={runs['filled']['peak_rss_mb']:.0f} "
          f"filled_time_ratio={runs['filled']['seconds'] / runs['plain']['seconds']:.2f}")


if __name__ == "__main__":
    main()
