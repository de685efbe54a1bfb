#!/usr/bin/env python3
"""Draws checks/s by threads, cellgate beside governor, from the rows `shapes --tsv` writes.

    cargo run --release --example shapes -- --tsv rows.tsv
    python3 examples/measure/chart.py rows.tsv "2-vCPU AMD EPYC VM" > shapes.svg

One panel per shape and parameter set (3 limiters with 1000 keys, one hot key, ...), threads on
the x axis, the median checks/s on the y axis (from zero), one line per limiter: cellgate's in
solid colours, governor's grey and dashed. The optional second argument names the machine in the
title. Standard library only: the output is a plain SVG file.
"""

import sys
from collections import OrderedDict

WIDTH, HEIGHT = 300, 220  # one panel
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 58, 12, 34, 40
COLS = 3
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def read(path):
    panels = OrderedDict()
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            fields = dict(zip(header, line.rstrip("\n").split("\t")))
            key = (fields["shape"], fields["params"])
            series = panels.setdefault(key, OrderedDict())
            points = series.setdefault(fields["limiter"], [])
            points.append((int(fields["threads"]), float(fields["checks_per_s"])))
    return panels


def nice_max(v):
    if v <= 0:
        return 1.0
    step = 10 ** (len(str(int(v))) - 1)
    for m in (1, 2, 2.5, 5, 10):
        if m * step >= v:
            return m * step
    return 10 * step


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def panel(x0, y0, title, series, out):
    threads = sorted({t for pts in series.values() for t, _ in pts})
    top = nice_max(max(r for pts in series.values() for _, r in pts) / 1e6)
    pw, ph = WIDTH - MARGIN_L - MARGIN_R, HEIGHT - MARGIN_T - MARGIN_B

    def px(t):
        i = threads.index(t)
        return x0 + MARGIN_L + (pw * i / max(1, len(threads) - 1) if len(threads) > 1 else pw / 2)

    def py(r):
        return y0 + MARGIN_T + ph - ph * (r / 1e6) / top

    out.append(f'<text x="{x0 + WIDTH / 2}" y="{y0 + 16}" text-anchor="middle" '
               f'font-size="12" font-weight="bold">{esc(title)}</text>')
    for k in range(5):
        v = top * k / 4
        y = py(v * 1e6)
        out.append(f'<line x1="{x0 + MARGIN_L}" y1="{y:.1f}" x2="{x0 + MARGIN_L + pw}" '
                   f'y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 + MARGIN_L - 4}" y="{y + 4:.1f}" text-anchor="end" '
                   f'font-size="10">{v:g}</text>')
    for t in threads:
        out.append(f'<text x="{px(t):.1f}" y="{y0 + MARGIN_T + ph + 14}" text-anchor="middle" '
                   f'font-size="10">{t}</text>')
    out.append(f'<text x="{x0 + MARGIN_L + pw / 2}" y="{y0 + HEIGHT - 8}" text-anchor="middle" '
               f'font-size="10">threads</text>')
    out.append(f'<text x="{x0 + 12}" y="{y0 + MARGIN_T + ph / 2}" font-size="10" '
               f'transform="rotate(-90 {x0 + 12} {y0 + MARGIN_T + ph / 2})" '
               f'text-anchor="middle">M checks/s</text>')
    colour = iter(COLOURS)
    legend_y = y0 + MARGIN_T + 4
    for name, pts in series.items():
        pts = sorted(pts)
        gov = name == "governor"
        c = "#888" if gov else next(colour, "#000")
        dash = ' stroke-dasharray="5,3"' if gov else ""
        path = " ".join(f"{px(t):.1f},{py(r):.1f}" for t, r in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for t, r in pts:
            out.append(f'<circle cx="{px(t):.1f}" cy="{py(r):.1f}" r="2.5" fill="{c}"/>')
        out.append(f'<line x1="{x0 + MARGIN_L + 6}" y1="{legend_y}" x2="{x0 + MARGIN_L + 20}" '
                   f'y2="{legend_y}" stroke="{c}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x0 + MARGIN_L + 24}" y="{legend_y + 3}" font-size="9">'
                   f'{esc(name)}</text>')
        legend_y += 11


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    panels = read(sys.argv[1])
    machine = sys.argv[2] if len(sys.argv) > 2 else ""
    rows = (len(panels) + COLS - 1) // COLS
    w, h = COLS * WIDTH, rows * HEIGHT + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">'
           f'checks/s by threads: cellgate (solid) and governor (grey, dashed), medians'
           f'{esc(", " + machine) if machine else ""}</text>']
    for i, ((shape, params), series) in enumerate(panels.items()):
        panel((i % COLS) * WIDTH, 30 + (i // COLS) * HEIGHT, f"{shape}: {params}", series, out)
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
