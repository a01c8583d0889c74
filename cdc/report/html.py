"""The reconciliation report as one self-contained HTML page: this run's table, the keys
a --deep run found, and per table a chart of row counts and lag over the runs kept in
the history table (inline SVG: no script, nothing fetched)."""
from __future__ import annotations

import datetime as dt
import math
from html import escape

COLORS = {"OK": "#1a7f37", "DRIFT": "#cf222e", "IN-FLIGHT": "#9a6700", "CAPTURE-STOPPED": "#cf222e"}
SOURCE, TARGET, LAG = "#0969da", "#8250df", "#bc4c00"
WIDTH, HEIGHT, PAD_L, PAD_R, PAD_T, PAD_B = 720, 240, 70, 60, 20, 40

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #1f2328; }
.wide { overflow-x: auto; max-width: 100%; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } .sub { color: #59636e; margin-top: 0; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { padding: 0.35em 0.6em; border-bottom: 1px solid #d1d9e0; text-align: right; }
th { background: #f6f8fa; } td.l, th.l { text-align: left; }
td.pos { font-family: monospace; font-size: 0.75em; word-break: break-all; max-width: 9em; }
td.ts { font-size: 0.85em; }
.badge { color: white; border-radius: 1em; padding: 0.1em 0.7em; font-weight: 600; font-size: 0.85em; }
.card { border: 1px solid #d1d9e0; border-radius: 8px; padding: 0.8em 1.2em; margin: 1em 0; max-width: 760px; }
.card h2 { font-size: 1.1em; margin: 0.2em 0 0.6em; } .keys { font-family: monospace; font-size: 0.85em; }
.legend span { margin-right: 1.2em; font-size: 0.85em; } .legend i { display: inline-block; width: 1.2em;
  height: 0.25em; vertical-align: middle; margin-right: 0.3em; }
"""


def _badge(status: str) -> str:
    return f'<span class="badge" style="background:{COLORS.get(status, "#59636e")}">{escape(status)}</span>'


def _num(value) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else escape(str(value))


def _time(value) -> str:
    """An ISO time to the second, in UTC ("-" when unknown)."""
    try:
        return dt.datetime.fromisoformat(value).astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    except (TypeError, ValueError):
        return _num(value)


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def _axis(lo: int, hi: int, n: int = 4) -> tuple[int, int, list[int]]:
    """An integer axis covering lo..hi in n equal whole steps: (bottom, top, ticks)."""
    step = max(1, math.ceil((hi - lo) / n))
    return lo, lo + step * n, [lo + step * i for i in range(n + 1)]


def chart(points: list[dict]) -> str:
    """Source and target rows (left axis) and lag (right axis) over the runs, as SVG;
    each run's dot has its status colour."""
    if not points:
        return "<p>No earlier runs.</p>"
    times = [p["checked_at"].timestamp() for p in points]
    counts = [v for p in points for v in (p["source_rows"], p["target_rows"]) if v is not None]
    lags = [p["lag"] or 0 for p in points]
    lo, hi, ticks = _axis(max(0, min(counts, default=0) - 1), max(counts, default=0) + 1)
    _, lag_top, lag_ticks = _axis(0, max(lags))
    x = _scale(min(times), max(times), PAD_L, WIDTH - PAD_R) if len(points) > 1 else (lambda _: (PAD_L + WIDTH - PAD_R) / 2)
    y = _scale(lo, hi, HEIGHT - PAD_B, PAD_T)
    y_lag = _scale(0, lag_top, HEIGHT - PAD_B, PAD_T)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-size="11" font-family="sans-serif">']
    for v in ticks:
        out.append(f'<line x1="{PAD_L}" x2="{WIDTH - PAD_R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eaeef2"/>'
                   f'<text x="{PAD_L - 6}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#59636e">{v:,.0f}</text>')
    for v in lag_ticks:
        out.append(f'<text x="{WIDTH - PAD_R + 6}" y="{y_lag(v) + 4:.1f}" fill="{LAG}">{v:,.0f}</text>')
    first, last = points[0]["checked_at"], points[-1]["checked_at"]
    for t, anchor, xpos in ((first, "start", PAD_L), (last, "end", WIDTH - PAD_R)):
        out.append(f'<text x="{xpos}" y="{HEIGHT - PAD_B + 16}" text-anchor="{anchor}" fill="#59636e">'
                   f'{t.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M:%S}Z</text>')
    out.append(f'<text x="{(PAD_L + WIDTH - PAD_R) / 2}" y="{HEIGHT - 6}" text-anchor="middle" fill="#59636e">'
               f'{len(points)} run(s)</text>')
    series = ((SOURCE, "source_rows", y, ""), (TARGET, "target_rows", y, ' stroke-dasharray="6 3"'),
              (LAG, "lag", y_lag, ' stroke-dasharray="2 3"'))
    for color, field, scale, dash in series:
        pts = [(x(t), scale(p[field])) for t, p in zip(times, points) if p[field] is not None]
        if len(pts) > 1:
            path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
    for t, p in zip(times, points):
        if p["target_rows"] is not None:
            out.append(f'<circle cx="{x(t):.1f}" cy="{y(p["target_rows"]):.1f}" r="4" '
                       f'fill="{COLORS.get(p["status"], "#59636e")}"><title>{escape(p["status"])}: '
                       f'{p["source_rows"]:,} source, {p["target_rows"]:,} target, lag {p["lag"] or 0}</title></circle>')
    out.append("</svg>")
    legend = (f'<div class="legend"><span><i style="background:{SOURCE}"></i>source rows</span>'
              f'<span><i style="background:{TARGET}"></i>target rows (dot: status)</span>'
              f'<span><i style="background:{LAG}"></i>lag, Kafka records (right axis)</span></div>')
    return "".join(out) + legend


def _reason(reason: str | None) -> str:
    """Why a table could not be compared (a registration that does not load, a stopped capture)."""
    return f"<p class=reason>{escape(reason)}</p>" if reason else ""


def _deep(found: dict | None) -> str:
    if found is None:
        return ""
    if not found["compared"]:
        return f"<p>Deep compare: not compared: {escape(found['reason'])}</p>"
    levels = ", ".join(f"{s['differing']} of {s['ranges']}" for s in found["levels"])
    text = (f"<p>Deep compare: {found['rows']['source']:,} source and {found['rows']['target']:,} target rows; "
            f"ranges differing by level: {escape(levels)}; <b>{found['missing']}</b> missing in the target, "
            f"<b>{found['extra']}</b> extra, <b>{found['different']}</b> different, "
            f"<b>{found['duplicate']}</b> duplicate.</p>")
    if found["keys"]:
        items = "".join(f"<li>{escape(k['kind'])}: " + escape(", ".join(f"{c}={v}" for c, v in k["key"].items()))
                        + "</li>" for k in found["keys"])
        text += f'<ul class="keys">{items}</ul>'
    return text


def format_html(rows: list[dict], history: dict[str, list[dict]]) -> str:
    ok = sum(r["status"] == "OK" for r in rows)
    checked = rows[0]["checked_at"] if rows else dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    head = ("<tr><th class=l>table</th><th>status</th><th>source rows</th><th>target rows</th><th>difference</th>"
            "<th>lag</th><th>dead letters</th><th class=l>source position</th><th class=l>target position</th>"
            "<th class=l>source commit time</th></tr>")
    body = "".join(
        f"<tr><td class=l>{escape(r['table'])}</td><td>{_badge(r['status'])}</td><td>{_num(r['source_rows'])}</td>"
        f"<td>{_num(r['target_rows'])}</td><td>{_num(r['difference'])}</td><td>{_num(r['lag'])}</td>"
        f"<td>{_num(r['dead_letters'])}</td><td class='l pos'>{_num(r['source_position'])}</td>"
        f"<td class='l pos'>{_num(r['target_position'])}</td><td class='l ts'>{_time(r['source_commit_time'])}</td></tr>"
        for r in rows)
    cards = "".join(
        f'<div class="card"><h2>{escape(r["table"])} {_badge(r["status"])}</h2>{_reason(r.get("reason"))}'
        f'{_deep(r.get("deep"))}'
        f'{chart(history.get(r["table"], []))}</div>' for r in rows)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>cdc reconciliation</title>"
            f"<style>{STYLE}</style></head><body><h1>cdc reconciliation report</h1>"
            f"<p class=sub>{ok} of {len(rows)} table(s) OK &middot; checked {escape(checked)}</p>"
            f"<div class=wide><table>{head}{body}</table></div>{cards}</body></html>")
