"""What feeds the collective log (runtime/collective_log.py): the places a training step issues
collectives.

- DDP: `allreduce_bucket`, the default gradient hook's work (divide, all-reduce) recording each
  bucket's index and bytes; `record_ddp(model)` registers it on a user's DDP model, and the
  reference trainer's own hook (train/layouts.py) calls it.
- FSDP2: `record_fsdp(model)` sets recording all-gather and reduce-scatter comms on every
  `fully_shard`-ed module (`FSDPModule.set_custom_all_gather` / `set_custom_reduce_scatter`,
  torch >= 2.7), which wrap torch's defaults, so every unshard and gradient reduce-scatter is
  recorded with its bytes.
- Anything else a script calls: `all_reduce(tensor, ...)` (also `RunContext.all_reduce`) and
  `recorded(op, tensor, group)` around any other call.
- NCCL: PyTorch's Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE > 0) already keeps this record
  for every NCCL collective, with its states; it is read at dump time instead of duplicated
  (`flight_recorder`), and the hooks stop recording once they see an NCCL group with it on.
  Coded against torch's documented dump format; unmeasured here (no GPU on the test machines).
"""

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runwright.layout import RunPaths
from runwright.runtime.collective_log import Collective, CollectiveLog, Dumper, process_log

FLIGHT_RECORDER_ENV = "TORCH_NCCL_TRACE_BUFFER_SIZE"


def _uses_flight_recorder(group: Any) -> bool:
    import torch.distributed as dist

    if int(os.environ.get(FLIGHT_RECORDER_ENV, "0") or 0) <= 0:
        return False
    return str(dist.get_backend(group)) == "nccl"


class _Checked:
    """Whether the process's groups were looked at for the Flight Recorder yet."""

    done = False


def _log_for(group: Any) -> CollectiveLog:
    log = process_log()
    if not _Checked.done:
        _Checked.done = True
        if _uses_flight_recorder(group):
            log.recording = False  # NCCL records it (module docstring)
    return log


def allreduce_bucket(
    bucket: Any, group: Any, divisor: int, on_done: Callable[[], None] | None = None
) -> Any:
    """DDP's default gradient all-reduce for `bucket` (average: divide by `divisor`, then sum),
    recorded; returns the future DDP's comm hook returns. `on_done()` runs when it completes,
    in the same callback as the record's exit: each chained `then` is a Python callback that
    runs cold after the backward, so a caller that times the bucket adds none of its own."""
    import torch.distributed as dist

    log = _log_for(group)
    tensor = bucket.buffer().div_(divisor)
    record = log.enter("all_reduce", tensor, group, bucket=bucket.index())
    future = dist.all_reduce(tensor, group=group, async_op=True).get_future()

    def done(fut: Any) -> Any:
        CollectiveLog.exit(record)
        if on_done is not None:
            on_done()
        return fut.value()[0]

    return future.then(done)


def record_ddp(model: Any, group: Any = None) -> None:
    """Register the recording all-reduce as `model`'s (a DistributedDataParallel) comm hook."""
    import torch
    import torch.distributed as dist

    divisor = dist.get_world_size(group)

    # DDP checks the hook's annotations against these very types.
    def hook(_state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        return allreduce_bucket(bucket, group, divisor)

    model.register_comm_hook(None, hook)


class recorded:
    """`with recorded("broadcast", tensor, group):` records the call made in the block."""

    __slots__ = ("_args", "_record")

    def __init__(self, op: str, tensor: Any, group: Any = None, **detail: Any) -> None:
        self._args = (op, tensor, group, detail)

    def __enter__(self) -> Collective | None:
        op, tensor, group, detail = self._args
        self._record = _log_for(group).enter(op, tensor, group, **detail)
        return self._record

    def __exit__(self, *_exc: object) -> None:
        CollectiveLog.exit(self._record)


def all_reduce(tensor: Any, op: Any = None, group: Any = None, **detail: Any) -> None:
    """`torch.distributed.all_reduce` (sum by default), recorded with `detail` (e.g. a label)."""
    import torch.distributed as dist

    with recorded("all_reduce", tensor, group, **detail):
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op is None else op, group=group)


def record_fsdp(model: Any) -> int:
    """Record every all-gather and reduce-scatter of `model`'s `fully_shard`-ed modules; returns
    how many modules record. Call after `fully_shard`."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    # FSDP2 calls its comms with these keywords (torch's _fsdp_collectives.py).
    class RecordedAllGather(DefaultAllGather):
        def __call__(
            self, output_tensor: Any, input_tensor: Any, group: Any, async_op: bool = False
        ) -> Any:
            record = _log_for(group).enter("all_gather", output_tensor, group)
            work = super().__call__(output_tensor, input_tensor, group, async_op)
            return _finish(record, work, async_op)

    class RecordedReduceScatter(DefaultReduceScatter):
        def __call__(
            self,
            output_tensor: Any,
            input_tensor: Any,
            group: Any,
            op: Any,
            async_op: bool = False,
        ) -> Any:
            record = _log_for(group).enter("reduce_scatter", input_tensor, group)
            work = super().__call__(output_tensor, input_tensor, group, op, async_op)
            return _finish(record, work, async_op)

    count = 0
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_all_gather(RecordedAllGather())
            module.set_custom_reduce_scatter(RecordedReduceScatter())
            count += 1
    return count


def _finish(record: Collective | None, work: Any, async_op: bool) -> Any:
    if record is None:
        return work
    if not async_op or work is None:
        CollectiveLog.exit(record)
    else:
        work.get_future().then(lambda _fut: CollectiveLog.exit(record))
    return work


def flight_recorder(path: Path) -> dict[str, Any]:
    """The NCCL Flight Recorder's entries as collective records, its raw dump kept at `path`
    (nothing when it is off or the build has no NCCL). `torch._C._distributed_c10d.
    _dump_nccl_trace()` returns the pickled dump (keys per entry: process_group,
    collective_seq_id, profiling_name, input_sizes, input_dtypes, state, time_created_ns,
    time_discovered_completed_ns: the fields torch's own analyser reads,
    torch/distributed/flight_recorder/components/builder.py)."""
    if int(os.environ.get(FLIGHT_RECORDER_ENV, "0") or 0) <= 0:
        return {}
    import torch

    dump = getattr(torch._C._distributed_c10d, "_dump_nccl_trace", None)
    if dump is None:
        return {}
    raw = dump()
    trace = pickle.loads(raw)
    records = []
    for entry in trace.get("entries", []):
        group = entry.get("process_group") or (entry.get("pg_id"),)
        sizes = entry.get("input_sizes") or [[]]
        dtypes = entry.get("input_dtypes") or ["?"]
        completed = entry.get("time_discovered_completed_ns")
        created = float(entry.get("time_created_ns") or 0) / 1e9
        records.append(
            {
                "group": str(group[0]),
                "seq": int(entry.get("collective_seq_id") or 0),
                "op": str(entry.get("profiling_name", "")).removeprefix("nccl:"),
                "dtype": str(dtypes[0]),
                "bytes": None,
                "shape": list(sizes[0]),
                "step": None,
                "enter_mono": None,
                "enter_wall": created,
                "exit_mono": None,
                "exit_wall": float(completed) / 1e9 if completed else None,
                "detail": {"state": entry.get("state"), "source": "nccl_flight_recorder"},
            }
        )
    path.write_bytes(raw)
    return {"flight_recorder": records}


class _Installed:
    """The process's dumper: one signal registration per process, so a second `init()` in one
    process (tests, notebooks) replaces the first's instead of racing it."""

    dumper: Dumper | None = None


def install_dumper(run_dir: Path, generation: int, rank: int) -> Dumper:
    """Start this rank's dumper (runtime.init does): its files are the run layout's."""
    if _Installed.dumper is not None:
        _Installed.dumper.close()
    paths = RunPaths(run_dir)
    dumper = Dumper(
        process_log(),
        paths.collective_dump(generation, rank),
        paths.stack_dump(generation, rank),
        {"rank": rank, "generation": generation, "pid": os.getpid()},
        extra=lambda: flight_recorder(paths.nccl_trace(generation, rank)),
    )
    dumper.install()
    _Installed.dumper = dumper
    return dumper
