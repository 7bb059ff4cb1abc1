"""Fast tests of the suite's pure parts: statistics, table, catalog, payload checks."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from bench.catalog import GROUPS, WORKLOADS, Row, by_name
from bench.payload import MIB, checksum, fingerprint, make_tensor, size_label
from bench.report import format_value, ratio, render
from bench.stats import Budget, Summary, mbps, percentile, time_sync
from bench.systems import SYSTEMS, entry
from bench.workloads import GENERIC, fanout_procs, state_dict_layout

LAT = Row("median_us", "median", "µs", "lower")
BW = Row("mbps", "bandwidth", "MB/s", "higher")
MEM = Row("rss_mb", "median", "MiB", "lower")


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)
    assert percentile([7.0], 99) == 7.0


def test_summary_reports_median_and_p99_in_microseconds() -> None:
    summary = Summary.of([i * 1e-6 for i in range(1, 101)])
    assert summary.n == 100
    assert summary.micros()["median_us"] == pytest.approx(50.5)
    assert summary.micros()["p99_us"] == pytest.approx(99.01)


def test_summary_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no samples"):
        Summary.of([])


def test_time_sync_stops_at_max_n_and_runs_warmup_untimed() -> None:
    calls = itertools.count()
    samples = time_sync(lambda: next(calls), Budget(max_n=7, seconds=60, warmup=3))
    assert len(samples) == 7
    assert next(calls) == 10


def test_time_sync_stops_on_time_once_min_n_is_reached() -> None:
    samples = time_sync(lambda: None, Budget(max_n=10**9, seconds=0.0, min_n=4))
    assert len(samples) == 4


def test_mbps_uses_decimal_megabytes() -> None:
    assert mbps(10**6, 0.5) == 2.0


@pytest.mark.parametrize(
    ("ours", "theirs", "row", "text"),
    [
        (100.0, 1230.0, LAT, "12.3x faster"),
        (200.0, 100.0, LAT, "2.0x slower"),
        (4000.0, 400.0, BW, "10.0x faster"),
        (30.0, 120.0, MEM, "4.0x smaller"),
        (100.0, 102.0, LAT, "same"),
        (0.001, 0.61, Row("cores", "mean", "cores", "lower"), "0.00 vs 0.61"),
        (0.001, 0.002, Row("cores", "mean", "cores", "lower"), "same"),
    ],
)
def test_ratio_says_how_actormesh_compares(ours: float, theirs: float, row: Row, text: str) -> None:
    assert ratio(ours, theirs, row) == text


def test_format_value_keeps_small_figures_readable() -> None:
    assert format_value(12345.6, "MB/s") == "12,346"
    assert format_value(14.04, "µs") == "14.0"
    assert format_value(0.537, "s") == "0.54"


def _doc(systems: dict[str, Any]) -> dict[str, Any]:
    return {"workloads": ["rtt_async", "tensor_arg_64m"], "systems": systems}


def test_render_shows_a_missing_peer_instead_of_dropping_it() -> None:
    ok = {"status": "ok", "metrics": {"median_us": 50.0, "p99_us": 80.0, "mbps": 4000.0}}
    table = render(
        _doc(
            {
                "actormesh": {
                    "label": "actormesh",
                    "workloads": {"rtt_async": ok, "tensor_arg_64m": ok},
                },
                "ray": {
                    "label": "Ray",
                    "workloads": {
                        "rtt_async": {
                            "status": "ok",
                            "metrics": {"median_us": 600.0, "p99_us": 800.0},
                        },
                        "tensor_arg_64m": {"status": "failed"},
                    },
                },
                "monarch": {
                    "label": "Monarch",
                    "workloads": {
                        n: {"status": "not installed"} for n in ("rtt_async", "tensor_arg_64m")
                    },
                },
            }
        )
    )
    lines = table.splitlines()
    assert lines[0].split(" | ")[3:] == ["actormesh", "Ray", "Monarch", "vs Ray", "vs Monarch |"]
    rtt = next(ln for ln in lines if "rtt_async | median" in ln)
    assert "| 50.0 | 600 | not installed | 12.0x faster |  |" in rtt
    bw = next(ln for ln in lines if "tensor_arg_64m" in ln)
    assert "| 4,000 | failed | not installed |" in bw


def test_catalog_names_are_unique_and_every_group_is_known() -> None:
    names = [w.name for w in WORKLOADS]
    assert len(names) == len(set(names))
    assert set(GROUPS) == {w.group for w in WORKLOADS}
    assert by_name("rtt_async").rows[0].unit == "µs"
    with pytest.raises(KeyError, match="known"):
        by_name("nope")


def test_generic_workloads_are_all_in_the_catalog() -> None:
    assert set(GENERIC) <= {w.name for w in WORKLOADS}


def test_registry_knows_every_system_and_rejects_strangers() -> None:
    names = [e.name for e in SYSTEMS]
    assert names == ["actormesh", "actormesh_pure", "monarch", "ray", "torchrpc", "floor"]
    assert entry("floor").installed()
    with pytest.raises(KeyError, match="known"):
        entry("dask")


def test_the_pure_python_column_forces_the_fallback_in_its_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench.run import _worker_env

    monkeypatch.delenv("ACTORMESH_NO_EXTENSIONS", raising=False)
    assert _worker_env(entry("actormesh_pure"))["ACTORMESH_NO_EXTENSIONS"] == "1"
    assert "ACTORMESH_NO_EXTENSIONS" not in _worker_env(entry("actormesh"))


def test_fanout_packs_actors_only_where_the_system_allows() -> None:
    class Packs:
        multi_actor_procs = True

    class OnePerProcess:
        multi_actor_procs = False

    assert fanout_procs(32, OnePerProcess()) == 32  # type: ignore[arg-type]
    procs = fanout_procs(32, Packs())  # type: ignore[arg-type]
    assert procs & (procs - 1) == 0 and 32 % procs == 0


def test_size_labels() -> None:
    assert [size_label(n) for n in (1024, 64 * MIB, 1000)] == ["1KiB", "64MiB", "1000B"]


def test_fingerprint_notices_a_changed_page_and_checksum_any_byte() -> None:
    t = make_tensor(64 * 1024)
    u = t.clone()
    u[1024] += 1  # first element of the second page
    assert fingerprint(t) != fingerprint(u)
    v = t.clone()
    v[5] += 1  # not a sampled element: only the full checksum sees it
    assert fingerprint(t) == fingerprint(v)
    assert checksum(t) != checksum(v)


def test_state_dict_layout_adds_up_to_about_the_size_asked() -> None:
    for nbytes in (100 * 10**6, 10**9):
        total = sum(size for _, size in state_dict_layout(nbytes))
        assert abs(total - nbytes) / nbytes < 0.05
