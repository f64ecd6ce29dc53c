"""Time one continuous-training cycle on the embedded default, stage by stage.

Usage:
    python bench/cycle.py [--cycles N]

Runs ``ctpipe cycle`` N times (default 1) with the settings from the environment and prints,
per cycle, the wall time of each DAG run next to the whole cycle, and the cycle's ratio to its
15-minute budget. Last line: ``cycles=<n> wall_s_max=<x> ratio_vs_budget_max=<y>``.
"""

from __future__ import annotations

import argparse

from ctpipe.config import Settings
from ctpipe.cycle import run_cycle

BUDGET_S = 15 * 60


def main(cycles: int) -> None:
    s = Settings()
    walls = []
    for _ in range(cycles):
        x = run_cycle(s)
        stages = "  ".join(f"{dag} {sec:.0f}s" for dag, sec in x["stages"].items())
        print(f"cycle {x['cycle']}: {x['wall_s']:.0f}s total ({x['wall_s'] / BUDGET_S:.2f} of budget); {stages}")
        walls.append(x["wall_s"])
    print(f"cycles={cycles} wall_s_max={max(walls):.1f} ratio_vs_budget_max={max(walls) / BUDGET_S:.3f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=1)
    main(p.parse_args().cycles)
