"""The benchmark's figures against their goals, as one PNG."""
from __future__ import annotations

from pathlib import Path

# key, goal, True when higher is better, label
GOALS = (
    ("apply_vs_limit", 0.5, True, "apply / append limit"),
    ("merge_scaling_10m_vs_1m", 2.0, False, "MERGE time, 10x table / 1x"),
    ("cdc_vs_delta_merge", 1.0, False, "time: cdc / Delta MERGE"),
    ("cdc_vs_pyiceberg_upsert", 0.1, False, "time: cdc / pyiceberg upsert"),
    ("cdc_batch_vs_delta_merge", 1.0, False, "time: cdc's whole batch / Delta MERGE"),
    ("freshness_p95_s", 1.5, False, "freshness p95 (s)"),
    ("bootstrap_jdbc_vs_debezium", 3.0, True, "bootstrap rate: JDBC / Debezium"),
    ("small_batch_s", 1.0, False, "a batch of 1,000 changes (s)"),
    ("backlog_vs_append_limit", 0.8, True, "backlog caught up / append limit"),
    ("backlog_peak_rss_mb", 2500, False, "backlog: driver peak RSS (MB)"),
    ("tables_100_freshness_p95_s", 10.0, False, "100 tables: freshness p95 (s)"),
    ("tables_100_idle_cpu_share", 0.05, False, "100 tables quiet: CPU share"),
    ("steady_cpu_s_per_batch", 0.3, False, "a small batch: driver CPU (s)"),
    ("commit_cpu_s", 0.2, False, "a direct commit: driver CPU (s)"),
    ("apply_avro_vs_json", 1.5, True, "apply rate: Avro / JSON"),
    ("cut_age_vs_freshness", 2.0, False, "consistent cut age p95 / freshness p95"),
)


def met(results: dict, key: str) -> bool | None:
    goal, higher = next((g, h) for k, g, h, _ in GOALS if k == key)
    value = results.get(key)
    return None if value is None else value >= goal if higher else value <= goal


def draw(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 4, figsize=(15, 12.5))
    for ax in axes.flat[len(GOALS):]:
        ax.axis("off")
    for ax, (key, goal, higher, label) in zip(axes.flat, GOALS):
        value = results.get(key)
        ok = met(results, key)
        color = "#1a7f37" if ok else "#cf222e" if ok is False else "#8c959f"
        ax.bar([0], [value or 0], width=0.5, color=color)
        ax.axhline(goal, color="#1f2328", linestyle="--", linewidth=1)
        ax.text(0.3, goal, f" goal {'≥' if higher else '≤'} {goal:g}", va="bottom", fontsize=9)
        ax.text(0, value or 0, "n/a" if value is None else f"{value:g}", ha="center", va="bottom", fontsize=11,
                fontweight="bold")
        ax.set_xlim(-0.6, 1.2)
        ax.set_ylim(0, max(goal, value or 0) * 1.3)
        ax.set_xticks([])
        ax.set_title(label, fontsize=10)
    m = results.get("machine", {})
    fig.suptitle(f"cdc benchmark ({results.get('mode', '')}): {m.get('cpus', '?')} cores, {m.get('platform', '')}",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
