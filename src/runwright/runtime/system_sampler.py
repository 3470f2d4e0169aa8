"""The node's system sampler: one daemon thread in the rank with local rank 0.

Who samples, and why here:
- one per node, so a node's CPU, disks, network and GPUs are read once, not once per rank;
- a thread of a rank, not the training thread: it wakes every `observability.system_sample_seconds`
  (10 s by default), reads psutil and NVML (observe/host.py, observe/nvml.py) and appends one
  SYSTEM_SAMPLE to the rank's channel file. The training thread never waits for it: the line
  goes through `ChannelWriter.telemetry` like a step's, its fsync deferred (runtime/channel.py);
- it survives a wedged rank the way the heartbeat thread does: a training thread blocked in a
  collective, a data read or a device sync waits outside the GIL, so the sampler keeps writing
  and the samples around a hang show what the node was doing. A process that died or holds the
  GIL stops sampling, and its missing heartbeats already say so;
- not the supervisor (one per generation, on the controller's host, not on every node) nor the
  torchrun agent (PyTorch's process, not ours), and not a sidecar process of its own, which would
  need a second lifetime to tie to the generation's (runwright/lifetime.py).

Each sample is stamped with the rank's newest healthy step and the writer's clock, so it sits on
the run's time axis beside the step timeline (observe/system_series.py). The first sample is
taken one interval after start (its rates need two readings) and the last one as the process
closes its run context. What each sample cost (CPU seconds of the sampler's thread) travels in
it, so the overhead is visible in the run's own data (benchmarks/system_sampler.py measures it
apart: about 0.7 ms of CPU a sample here, 0.007 % of one core at 10 s).
"""

import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from runwright.events import EventType
from runwright.layout import RunPaths, checkpoint_root
from runwright.observe.host import HostReader, rates
from runwright.observe.nvml import open_gpus
from runwright.spec.observability import DEFAULT_SYSTEM_SAMPLE_SECONDS

if TYPE_CHECKING:
    from runwright.runtime.context import RunContext

DEFAULT_SAMPLE_SECONDS = DEFAULT_SYSTEM_SAMPLE_SECONDS
"""The interval under plain torchrun without a spec: the spec's default."""


class SystemSampler:
    """Samples this node every `interval_seconds` until `stop`."""

    def __init__(
        self,
        ctx: "RunContext",
        interval_seconds: float,
        folders: dict[str, Path],
        node: int | None,
    ) -> None:
        self.ctx = ctx
        self.interval_seconds = interval_seconds
        self.node = node
        self.host = socket.gethostname()
        self.reader = HostReader(folders)
        self.gpus = open_gpus()
        self.samples = 0
        self._before = self.reader.read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runwright-system", daemon=True)

    def start(self) -> "SystemSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_seconds):
            self._sample_once()

    def _sample_once(self) -> None:
        try:
            self._before = self.sample(self._before)
        except (OSError, psutil.Error):
            # /proc or a counter unreadable this once (a folder unmounted, a container's
            # limits): skip the sample; the next one measures from a fresh reading.
            self._before = self.reader.read()

    def sample(self, before: Any) -> Any:
        """Take and send one sample against the `before` reading; returns the new reading."""
        cpu_start = time.thread_time()
        after = self.reader.read()
        attributes: dict[str, Any] = {"host": self.host, "node": self.node}
        attributes.update(rates(before, after))
        attributes.update(self.reader.levels())
        if self.gpus is not None:
            attributes["gpus"] = self.gpus.read()
        attributes["sample_cpu_seconds"] = round(time.thread_time() - cpu_start, 6)
        self.samples += 1
        ctx = self.ctx
        ctx.channel.telemetry(
            EventType.SYSTEM_SAMPLE,
            step=ctx.last_step,
            event_id=f"g{ctx.generation}-r{ctx.rank}-sys{self.samples}",
            world_size=ctx.world_size,
            attributes=attributes,
        )
        return after

    def stop(self) -> None:
        """Stop the thread and take a last sample (the node as the process ends), so a run
        shorter than the interval still has its node on record: one sample more per process
        at most, so the rate bound holds."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._sample_once()
        if self.gpus is not None:
            self.gpus.close()


def start_system_sampler(ctx: "RunContext", node: int | None) -> SystemSampler | None:
    """Start the node's sampler in this process if it is the node's local rank 0 and the spec
    samples (`observability.system_sample_seconds`, not None); otherwise None."""
    if ctx.local_rank != 0:
        return None
    spec = ctx.spec
    interval = spec.observability.system_sample_seconds if spec else DEFAULT_SAMPLE_SECONDS
    if interval is None:
        return None
    paths = RunPaths(ctx.run_dir)
    folders = {"run": ctx.run_dir}
    ckpt = checkpoint_root(paths, spec.checkpoint.location if spec else None)
    if "://" not in ckpt:  # an object store has no local file system to read
        # Not yet created before the first save: its file system is the nearest existing parent.
        folders["checkpoints"] = _existing(Path(ckpt))
    return SystemSampler(ctx, interval, folders, node).start()


def _existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path
