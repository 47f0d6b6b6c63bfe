"""Draws the per-round samples of a `deltainfer bench ab` report: one panel per scenario and metric,
A and B in run order, so that drift and outliers are visible beside the summary's medians.

usage: python3 tools/bench/plot_ab.py REPORT.json OUT.png   (needs matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    report = json.load(open(sys.argv[1]))
    metrics = ["total_tokens_per_s", "ttft_p50_ms", "tpot_p50_ms"]
    scenarios = report["scenarios"]
    fig, axes = plt.subplots(len(scenarios), len(metrics), figsize=(4.2 * len(metrics), 2.6 * len(scenarios)),
                             squeeze=False)
    names = {side: report["configs"][side]["name"] for side in ("a", "b")}
    for row, sc in enumerate(scenarios):
        for col, metric in enumerate(metrics):
            ax = axes[row][col]
            if metric not in sc["comparison"]:
                ax.axis("off")
                continue
            for side, marker in (("a", "o"), ("b", "s")):
                xs = [i for i, run in enumerate(sc["runs"]) if run["config"] == side]
                ys = [run["sample"][metric] for run in sc["runs"] if run["config"] == side]
                ax.plot(xs, ys, marker, label=names[side])
            c = sc["comparison"][metric]
            ax.set_title(f"{sc['name']}: {metric}\nB/A {c['ratio_b_over_a']:.3f} "
                         f"({c['ci95'][0]:.3f}-{c['ci95'][1]:.3f})", fontsize=8)
            ax.set_xlabel("run (A, B, B, A per round)", fontsize=7)
            ax.tick_params(labelsize=7)
            if row == 0 and col == 0:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
