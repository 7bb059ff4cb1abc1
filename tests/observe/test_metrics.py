"""``record_metric`` in real worker processes and the controller, reduced per step across
ranks by ``MetricLogger`` and read back from each backend's own files: the JSONL file,
TensorBoard's event file (with TensorBoard's reader) and a W&B offline run (its record
log, read here with a small reader of W&B's framing)."""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import struct
from pathlib import Path

import pytest
from telemetry_actors import Recorder

from actormesh import proc_mesh
from actormesh.observability import (
    ConsoleBackend,
    JsonlBackend,
    MetricLogger,
    Reduce,
    TensorBoardBackend,
    WandbBackend,
    record_metric,
)

RANKS = 3


def _expected(step: int) -> dict[str, float]:
    # What Recorder.train_step records on each rank, plus the controller's own value.
    values = [v for r in range(RANKS) for v in (r + step, r + step + 0.5)]
    return {
        "loss": statistics.fmean(values),
        "tokens": sum(values),
        "reward/max": max(values),
        "reward/min": min(values),
        "reward/std": statistics.pstdev(values),
        "controller/lr": 0.1 * (step + 1),
    }


def _tensorboard_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    ).EventAccumulator(str(logdir))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def _wandb_history(run_dir: Path) -> list[dict[str, float]]:
    """The ``history`` records of an offline run's ``.wandb`` file: W&B frames protobuf
    records as LevelDB's log does (32 KiB blocks, a 7-byte header per chunk: CRC, length,
    type), after a 7-byte file header."""
    pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
    data = next(run_dir.glob("run-*.wandb")).read_bytes()
    assert data[:4] == b":W&B"
    offset, block, pending, history = 7, 32768, b"", []
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a header: padding
            offset += block - offset % block
            continue
        _, length, kind = struct.unpack_from("<IHB", data, offset)
        chunk = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind == 0:
            break
        pending += chunk
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                items = {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
                history.append(items)
    return history


def test_metrics_of_every_rank_are_reduced_per_step_and_written_to_each_backend(
    tmp_path: Path,
) -> None:
    console = io.StringIO()
    backends = [
        ConsoleBackend(console),
        JsonlBackend(tmp_path / "metrics.jsonl"),
        TensorBoardBackend(tmp_path / "tb"),
    ]
    with contextlib.suppress(ImportError):  # without wandb the others are still checked
        backends.append(WandbBackend("actormesh-test", dir=tmp_path))
    with proc_mesh(gpus=RANKS).get() as procs:
        recorders = procs.spawn("recorder", Recorder)
        with MetricLogger(backends) as logger:
            written = []
            for step in range(2):
                recorders.train_step.call(step).get()
                record_metric("controller/lr", 0.1 * (step + 1))
                written.append(logger.flush(step).get(timeout=60))
    for step, values in enumerate(written):
        assert values == pytest.approx(_expected(step))

    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1]
    for line in lines:
        assert line["metrics"] == pytest.approx(_expected(line["step"]))

    scalars = _tensorboard_scalars(tmp_path / "tb")
    for key in _expected(0):
        steps = [step for step, _ in scalars[key]]
        assert steps == [0, 1]
        got = [value for _, value in scalars[key]]
        assert got == pytest.approx([_expected(s)[key] for s in (0, 1)], rel=1e-6)

    assert "=== metrics step 1 ===" in console.getvalue()
    assert "tokens:" in console.getvalue()

    if len(backends) == 4:
        run_dir = next((tmp_path / "wandb").glob("offline-run-*"))
        history = _wandb_history(run_dir)
        assert [h["_step"] for h in history] == [0, 1]
        for h in history:
            want = _expected(h["_step"])
            assert {k: h[k] for k in want} == pytest.approx(want)


def test_a_flush_takes_only_what_was_recorded_since_the_last(tmp_path: Path) -> None:
    with proc_mesh(gpus=2).get() as procs:
        recorders = procs.spawn("recorder", Recorder)
        logger = MetricLogger()
        recorders.record_async.call("count", 1.0).get()
        assert logger.flush(0).get(timeout=60) == {"count": 2.0}
        assert logger.flush(1).get(timeout=60) == {}
        recorders.record_async.call("count", 2.0).get()
        assert logger.flush(2).get(timeout=60) == {"count": 4.0}
        logger.close()
        with pytest.raises(RuntimeError, match="closed"):
            logger.flush(3)


def test_bad_logger_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="is not a metric backend"):
        MetricLogger([object()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="step must be an int"):
        MetricLogger().flush("1")  # type: ignore[arg-type]
    assert Reduce("std") is Reduce.STD
