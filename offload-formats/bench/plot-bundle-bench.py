#!/usr/bin/env python3
"""Plot bundle-vs-clang.sh's --raw results as one SVG (no libraries needed).

    offload-formats/bench/plot-bundle-bench.py RAW.txt OUT.svg

RAW lines: "MIB TYPE TOOL MODE WALL_S PEAK_KIB" (TYPE is e.g. bc, ll, bc+compress).
Two panels, one group of bars per (input size, type, mode): the median wall time as a
ratio to clang-offload-bundler's median in the same run, and the median peak RSS
(log scale). Dashed lines: the 0.5x time goal and the 64 MiB memory goal.
"""
import math
import statistics
import sys
from collections import defaultdict

TOOLS = [("clang", "clang-offload-bundler-22", "#888888"),
         ("before", "offload-inspect before", "#d08c3a"),
         ("after", "offload-inspect after", "#2f6fb0")]


def load(path):
    runs = defaultdict(list)
    for line in open(path):
        f = line.split()
        if len(f) != 6:
            continue
        mib, ty, tool, mode, wall, peak = f
        runs[(int(mib), ty, mode, tool)].append((float(wall), float(peak)))
    return runs


def groups(runs):
    keys = sorted({(m, t, mode) for (m, t, mode, _) in runs},
                  key=lambda k: (k[0], k[1], k[2] != "bundle"))
    out = []
    for m, t, mode in keys:
        med = {}
        for tool, _, _ in TOOLS:
            r = runs.get((m, t, mode, tool))
            if r:
                med[tool] = (statistics.median(w for w, _ in r),
                             statistics.median(p for _, p in r) / 1024)
        if "clang" in med:
            size = f"{m // 1024} GiB" if m >= 1024 else f"{m} MiB"
            out.append((size, t.replace("+compress", " -compress").replace("+code", ", code"), mode, med))
    return out


def svg(groups_):
    bar, gap, left, top, panel_h = 16, 34, 70, 40, 220
    width = left + len(groups_) * (3 * bar + gap) + 90
    height = top + 2 * (panel_h + 100) + 40
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'font-family="sans-serif" font-size="11">',
         f'<rect width="{width}" height="{height}" fill="white"/>']

    def panel(y0, title, value, scale, ticks, goal, goal_label):
        s.append(f'<text x="{left}" y="{y0 - 12}" font-size="13">{title}</text>')
        s.append(f'<line x1="{left}" y1="{y0 + panel_h}" x2="{width - 10}" '
                 f'y2="{y0 + panel_h}" stroke="black"/>')
        for t in ticks:
            y = y0 + panel_h - scale(t) * panel_h
            s.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{width - 10}" y2="{y:.1f}" '
                     f'stroke="#e4e4e4"/>')
            s.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{t:.3g}</text>' if t < 1000
                     else f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{t:,.0f}</text>')
        y = y0 + panel_h - scale(goal) * panel_h
        s.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 75}" y2="{y:.1f}" '
                 f'stroke="#c03030" stroke-dasharray="5,3"/>')
        s.append(f'<text x="{width - 8}" y="{y + 4:.1f}" text-anchor="end" '
                 f'fill="#c03030">{goal_label}</text>')
        x = left + gap / 2
        for size, kind, mode, med in groups_:
            label = f"{size} {kind}"
            for i, (tool, _, colour) in enumerate(TOOLS):
                if tool not in med:
                    continue
                v = value(med, tool)
                h = max(scale(v), 0) * panel_h
                s.append(f'<rect x="{x + i * bar:.1f}" y="{y0 + panel_h - h:.1f}" '
                         f'width="{bar - 2}" height="{h:.1f}" fill="{colour}">'
                         f'<title>{label} {mode} {tool}: {v:.3g}</title></rect>')
            cx = x + 1.5 * bar
            s.append(f'<text x="{cx:.1f}" y="{y0 + panel_h + 14}" text-anchor="middle">'
                     f'{mode}</text>')
            s.append(f'<text x="{cx:.1f}" y="{y0 + panel_h + 27}" text-anchor="middle">'
                     f'{size}</text>')
            s.append(f'<text x="{cx:.1f}" y="{y0 + panel_h + 40}" text-anchor="middle">'
                     f'{kind}</text>')
            x += 3 * bar + gap

    top_ratio = max(2.0, max(med[t][0] / med["clang"][0]
                             for *_, med in groups_ for t in med))
    panel(top, "Wall time / clang-offload-bundler-22's (median, same run)",
          lambda med, t: med[t][0] / med["clang"][0],
          lambda v: v / top_ratio, [0, 0.5, 1, 1.5, 2] + ([top_ratio] if top_ratio > 2 else []),
          0.5, "goal 0.5x")
    peak_max = max(med[t][1] for *_, med in groups_ for t in med)
    decades = math.ceil(math.log10(peak_max))

    def log_scale(v):
        return math.log10(max(v, 1)) / decades
    panel(top + panel_h + 100, "Peak RSS, MiB (median, log scale)",
          lambda med, t: med[t][1], log_scale, [10 ** d for d in range(decades + 1)],
          64, "64 MiB")
    ly = height - 18
    lx = left
    for _, name, colour in TOOLS:
        s.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
        s.append(f'<text x="{lx + 14}" y="{ly}">{name}</text>')
        lx += 14 + 7 * len(name)
    s.append('</svg>')
    return "\n".join(s) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    g = groups(load(sys.argv[1]))
    if not g:
        sys.exit(f"{sys.argv[1]}: no runs with clang-offload-bundler's to compare")
    open(sys.argv[2], "w").write(svg(g))


if __name__ == "__main__":
    main()
