"""PNG charts of a results document: one line per system.

- ``payload_latency.png``: tensor-argument round trip (µs) against payload size;
- ``payload_bandwidth.png``: the same as MB/s;
- ``fanout.png``: call + gather latency (µs) against the number of actors.

The floor's line is a raw Unix socket in the payload charts (with memcpy as a second,
dotted line in the bandwidth chart) and bare echo processes in ``fanout``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.catalog import FANOUT_SIZES
from bench.payload import size_label

__all__ = ["draw"]

_STYLE = {
    "actormesh": {"color": "tab:red", "linewidth": 2.5, "marker": "o"},
    "monarch": {"color": "tab:blue", "marker": "s"},
    "ray": {"color": "tab:orange", "marker": "^"},
    "torchrpc": {"color": "tab:green", "marker": "D"},
    "floor": {"color": "black", "linestyle": "--", "marker": "."},
}


def _ok(results: dict[str, Any], workload: str) -> dict[str, tuple[str, dict[str, Any]]]:
    out = {}
    for name, system in results["systems"].items():
        result = system.get("workloads", {}).get(workload)
        if result and result.get("status") == "ok":
            out[name] = (system.get("label", name), result["metrics"])
    return out


def _series(metrics: dict[str, Any], xs: list[int], key: str) -> tuple[list[int], list[float]]:
    px, py = [], []
    for x in xs:
        value = metrics.get(key.format(x=x, label=size_label(x)))
        if isinstance(value, int | float):
            px.append(x)
            py.append(float(value))
    return px, py


def draw(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write the charts into ``out_dir``; returns their paths (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    machine = results.get("meta", {}).get("machine", {}).get("summary", "")
    specs = [
        ("payload_sweep", "payload_latency.png", "{label}_us", "round trip (µs)",
         "Tensor argument round trip vs payload size", "payload size (bytes)"),
        ("payload_sweep", "payload_bandwidth.png", "{label}_mbps", "MB/s",
         "Tensor argument bandwidth vs payload size", "payload size (bytes)"),
        ("fanout", "fanout.png", "n{x}_us", "call + gather median (µs)",
         "Fan-out: call + gather latency vs mesh size", "actors in the mesh"),
    ]  # fmt: skip
    written = []
    for workload, filename, key, ylabel, title, xlabel in specs:
        systems = _ok(results, workload)
        if not systems:
            continue
        fig, ax = plt.subplots(figsize=(8, 5))
        for name, (label, metrics) in systems.items():
            xs = list(metrics.get("sizes", FANOUT_SIZES))
            px, py = _series(metrics, xs, key)
            if name == "floor":
                label += " (raw socket)" if workload == "payload_sweep" else " (bare processes)"
            if px:
                ax.plot(px, py, label=label, **_STYLE.get(name, {}))  # type: ignore[arg-type]
            px, py = _series(metrics, xs, "memcpy_" + key)
            if px and key.endswith("mbps"):
                ax.plot(px, py, label="memcpy", color="grey", linestyle=":", marker=".")
        ax.set_xscale("log", base=2 if workload == "fanout" else 4)
        ax.set_yscale("log")
        if workload == "payload_sweep":
            ticks = list(next(iter(systems.values()))[1].get("sizes", []))
            ax.set_xticks(ticks, [size_label(t) for t in ticks], rotation=30)
        else:
            ax.set_xticks(list(FANOUT_SIZES), [str(n) for n in FANOUT_SIZES])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}\n{machine}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out_dir / filename
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
