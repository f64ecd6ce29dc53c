"""Server-side SVG charts: no JavaScript, no build step, nothing fetched from a CDN.

Every text that reaches the SVG is escaped here, so callers may mark the result safe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def line_chart(
    title: str,
    x: Sequence[float],
    series: dict[str, Sequence[float | None]],
    *,
    bands: dict[str, Sequence[tuple[float, float] | None]] | None = None,
    width: int = 480,
    height: int = 180,
    x_label: str = "",
) -> Markup:
    """Lines (gaps where a value is missing) with optional interval bars; min/max ticks on both axes."""
    pad_l, pad_r, pad_t, pad_b = 48, 12, 22, 30
    ys = [v for s in series.values() for v in _finite(s)]
    ys += [v for b in (bands or {}).values() for iv in b if iv for v in iv]
    xs = _finite(x)
    if not xs or not ys:
        return Markup(f'<svg class="chart" width="{width}" height="40" role="img"><text x="4" y="24">'
                      f"{escape(title)}: no data yet</text></svg>")
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def px(v: float) -> float:
        return pad_l + (v - x0) / (x1 - x0) * (width - pad_l - pad_r)

    def py(v: float) -> float:
        return height - pad_b - (v - y0) / (y1 - y0) * (height - pad_t - pad_b)

    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{pad_l}" y="14" class="title">{escape(title)}</text>',
        f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" class="axis"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" class="axis"/>',
        f'<text x="{pad_l - 4}" y="{py(y1) + 4:.1f}" text-anchor="end">{_fmt(y1)}</text>',
        f'<text x="{pad_l - 4}" y="{py(y0) + 4:.1f}" text-anchor="end">{_fmt(y0)}</text>',
        f'<text x="{pad_l}" y="{height - 12}">{_fmt(x0)}</text>',
        f'<text x="{width - pad_r}" y="{height - 12}" text-anchor="end">{_fmt(x1)}</text>',
        f'<text x="{(width + pad_l) / 2:.0f}" y="{height - 4}" text-anchor="middle">{escape(x_label)}</text>',
    ]
    for i, (name, values) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        for lo_hi, xv in zip((bands or {}).get(name) or [], x):
            if lo_hi:
                out.append(f'<line x1="{px(xv):.1f}" y1="{py(lo_hi[0]):.1f}" x2="{px(xv):.1f}" y2="{py(lo_hi[1]):.1f}" '
                           f'stroke="{color}" stroke-opacity="0.45" stroke-width="3"/>')
        runs, run = [], []
        for xv, yv in zip(x, values):
            if isinstance(yv, (int, float)) and math.isfinite(yv):
                run.append(f"{px(xv):.1f},{py(yv):.1f}")
            elif run:
                runs.append(run)
                run = []
        runs.append(run)
        for r in runs:
            if len(r) == 1:
                cx, cy = r[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{color}"/>')
            elif r:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(r)}"/>')
        if len(series) > 1 or name != title:  # a one-line chart's title already names it
            out.append(f'<text x="{width - pad_r}" y="{14 + 12 * i}" text-anchor="end" fill="{color}">{escape(name)}</text>')
    out.append("</svg>")
    return Markup("".join(out))
