"""Guard-trip capture (runtime/guard_capture.py) in one process: a real run context writing to
its real channel and diagnostics folder, a real model with gradients, a batch of token ids.
The whole run (the reference trainer's NaN at step 5, under the controller) is
tests/control/test_escalation_run.py."""

import json
import math

import torch

from runwright.events import EventType
from runwright.layout import RunPaths
from runwright.protocol import decode_message
from runwright.runtime.channel import ChannelWriter
from runwright.runtime.context import RunContext
from runwright.runtime.guard_capture import (
    MAX_BYTES,
    MAX_CAPTURES,
    capture_guard_trip,
    input_summary,
)
from runwright.runtime.stop import StopWatcher

SECRET = 4242
"""A token id that appears in the batch and must not appear in the capture."""


def ints(value):
    """Every integer in a JSON value (shapes, counts, lengths), however deep."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from ints(item)
    elif isinstance(value, list):
        for item in value:
            yield from ints(item)


def context(run_dir) -> RunContext:
    return RunContext(
        run_id="r-capture",
        generation=3,
        rank=1,
        local_rank=1,
        world_size=2,
        run_dir=run_dir,
        spec=None,
        rank_entry=None,
        channel=ChannelWriter(RunPaths(run_dir).channel, 3, 1),
        managed=False,
        stop_watcher=StopWatcher(run_dir, 3),
    )


def test_a_tripped_step_is_captured_without_its_tokens(tmp_path):
    ctx = context(tmp_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5000, 8), torch.nn.Linear(8, 5000))
    tokens = torch.full((3, 16), SECRET, dtype=torch.int64)
    tokens[2, 8:] = 0
    segments = (tokens != 0).int()
    model(tokens).float().mean().backward()
    model[1].weight.grad[0, 0] = math.nan  # what a NaN step leaves behind
    summary = input_summary(tokens, loss_mask=segments.float(), segment_ids=segments,
                            sources={"dataset_id": "d" * 64, "samples": [12, 15]})  # fmt: skip
    nan = torch.tensor(math.nan)
    path = capture_guard_trip(ctx, 7, "nan_inf", model=model, inputs=summary, lr=3e-4,
                              precision="bf16", loss=nan, grad_norm=1.5)  # fmt: skip
    ctx.channel.close()
    assert path == RunPaths(tmp_path).guard_capture(3, 7, 1) and path.stat().st_size < MAX_BYTES
    record = json.loads(path.read_text())
    assert SECRET not in list(ints(record))  # no token id, so no text can be decoded back
    assert (record["guard"], record["step"], record["rank"], record["generation"]) == (
        "nan_inf", 7, 1, 3
    )  # fmt: skip
    rows = record["inputs"]["rows"]
    assert [r["length"] for r in rows] == [16, 16, 8] and rows[0]["sha256"] == rows[1]["sha256"]
    assert rows[0]["sha256"] != rows[2]["sha256"] and len(rows[0]["sha256"]) == 16
    assert record["inputs"]["sources"]["samples"] == [12, 15]
    assert record["figures"] == {"loss": "nan", "grad_norm": 1.5}
    assert record["learning_rate"] == 3e-4 and record["precision"] == "bf16"
    assert record["versions"]["torch"] == torch.__version__
    head = record["parameters"]["1.weight"]
    assert head["shape"] == [5000, 8] and head["grad"]["nonfinite"] == 1
    assert head["weight"]["nonfinite"] == 0 and head["weight"]["norm"] > 0
    lines = RunPaths(tmp_path).channel_file(3, 1).read_bytes().splitlines()
    (sent,) = [m for m in map(decode_message, lines) if m is not None]
    assert sent.type == EventType.GUARD_CAPTURED and sent.attributes["path"] == str(path)


def test_a_large_model_is_cut_to_the_bound(tmp_path):
    ctx = context(tmp_path)
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(3000)])
    summary = input_summary(torch.zeros(1, 4, dtype=torch.int64))
    path = capture_guard_trip(ctx, 1, "loss_spike", model=model, inputs=summary, lr=None,
                              precision="fp32", loss=9.0, window_mean=1.0)  # fmt: skip
    ctx.channel.close()
    record = json.loads(path.read_text())
    assert path.stat().st_size <= MAX_BYTES
    assert len(record["parameters"]) + record["parameters_left_out"] == 6000
    assert record["parameters_left_out"] > 0


def test_captures_stop_at_their_bound(tmp_path):
    ctx = context(tmp_path)
    model = torch.nn.Linear(2, 2)
    summary = input_summary(torch.zeros(1, 4, dtype=torch.int64))
    written = [
        capture_guard_trip(
            ctx,
            step,
            "loss_spike",
            model=model,
            inputs=summary,
            lr=None,
            precision="fp32",
            loss=9.0,
        )
        for step in range(MAX_CAPTURES + 2)
    ]
    ctx.channel.close()
    assert written[-2:] == [None, None] and all(written[:MAX_CAPTURES])
    assert len(RunPaths(tmp_path).guard_captures(3, 1)) == MAX_CAPTURES
