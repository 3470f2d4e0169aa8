"""The run context inside a training process: who this rank is in which run and generation, its
channel to the controller, its stop agreement, heartbeats and its close. `runwright.runtime.init()`
(runtime/startup.py) builds it.
"""

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright import events
from runwright.events import EventType
from runwright.layout import RunPaths
from runwright.protocol import (
    OPERATOR_SAVING_STOPS,
    RankEntry,
    StopRequest,
)
from runwright.runtime import collective_hooks, tracing
from runwright.runtime.channel import ChannelWriter
from runwright.runtime.steploop import StepLoop
from runwright.runtime.stop import StopAgreement, StopRun, StopWatcher
from runwright.spec import JobSpec, ResolvedPlan
from runwright.spec.elastic import plan_at_world

if TYPE_CHECKING:
    from runwright.ckpt import Checkpointer
    from runwright.observe.trackers import TrackerSink
    from runwright.runtime.system_sampler import SystemSampler


@dataclass
class RunContext:
    """Who this process is within the run, and its line to the controller."""

    run_id: str
    generation: int
    rank: int
    local_rank: int
    world_size: int
    run_dir: Path
    spec: JobSpec | None
    rank_entry: RankEntry | None
    channel: ChannelWriter
    managed: bool
    """True when started by a runwright controller; False under plain torchrun."""
    stop_watcher: StopWatcher
    skip_steps: list[tuple[int, int]] = field(default_factory=list)
    """Inclusive step ranges whose batches are consumed without an update."""
    last_step: int = 0
    """The newest step this rank reported healthy."""
    stop_request: StopRequest | None = None
    """The stop the group agreed on (the step loop sets it); a stopped run is not complete."""
    _checkpointers: list[Any] = field(default_factory=list, repr=False)
    _agreement: StopAgreement | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)
    _stop_heartbeat: threading.Event = field(default_factory=threading.Event, repr=False)
    _heartbeat: threading.Thread | None = field(default=None, repr=False)
    _trackers: "TrackerSink | None" = field(default=None, repr=False)
    """Rank 0's copy of the step metrics to the spec's trackers (TensorBoard, MLflow)."""
    _system: "SystemSampler | None" = field(default=None, repr=False)
    """The node's system sampler, in its local rank 0 only (runtime/system_sampler.py)."""
    _dumper: Any = field(default=None, repr=False)
    """Dumps the collective log on SIGUSR1 and at close (runtime/collective_log.py)."""

    @property
    def plan(self) -> ResolvedPlan | None:
        """The plan at this group's size: an elastic run restarted on fewer nodes keeps its
        global batch with another dp, micro-batch and accumulation (spec/elastic.py)."""
        return plan_at_world(self.spec, self.world_size) if self.spec else None

    def event(
        self, type_: str, *, step: int | None = None, event_id: str | None = None, **attributes: Any
    ) -> None:
        """Report an event (e.g. CHECKPOINT_COMMITTED); the controller stores it once."""
        self.channel.send(
            type_, step=step, event_id=event_id, world_size=self.world_size, attributes=attributes
        )
        if self._trackers is not None:
            self._trackers.observe(type_, step, attributes)

    def report(
        self,
        type_: EventType,
        *,
        key: str | None = None,
        step: int | None = None,
        checkpoint_id: str | None = None,
        **attributes: Any,
    ) -> None:
        """The process's event hook (`runwright.events.emit`): `key` makes the event one per
        generation, whichever ranks send it."""
        self.channel.send(
            type_,
            step=step,
            event_id=f"g{self.generation}-{key}" if key else None,
            checkpoint_id=checkpoint_id,
            world_size=self.world_size,
            attributes=attributes,
        )

    def step_healthy(
        self, step: int, *, loader_facts: bool = True, stop_check: bool = True, **metrics: Any
    ) -> None:
        """Report that optimizer step `step` completed on this rank, with its metrics. With
        `loader_facts`, what the run's loaders know of the step's batch (sample range, tokens,
        input wait, what quarantined shards cost) is added where `metrics` does not say it (the
        step loop turns it off for a step it skipped).

        This is also the two-line integration's step boundary: once a stop was asked for
        (`runwright cancel`, SIGTERM, Ctrl-C, a budget), every rank stops after the same step,
        and this call raises `StopRun` there (catch it to save). Call it on every rank. The step
        loop, which agrees on stops itself, passes `stop_check=False`."""
        self.report_step(step, metrics, loader_facts=loader_facts)
        if stop_check:
            self._stop_at_boundary(step)

    def report_step(self, step: int, metrics: dict[str, Any], *, loader_facts: bool) -> str | None:
        """`step_healthy`'s report without the stop check. Returns the attributes as the
        channel line encoded them (with the loader's facts), or None where that line took the
        model's encoder (runtime/channel.py): the step loop's timeline line reuses them."""
        self.last_step = max(self.last_step, step)
        if loader_facts:
            facts = events.step_facts()
            if facts:
                metrics = {**facts, **metrics}
        encoded = self.channel.telemetry(
            EventType.STEP_HEALTHY,
            step=step,
            event_id=f"g{self.generation}-r{self.rank}-step{step}",
            world_size=self.world_size,
            attributes=metrics,
        )
        if self._trackers is not None:
            self._trackers.observe(EventType.STEP_HEALTHY, step, metrics)
        return encoded

    def _stop_at_boundary(self, step: int) -> None:
        local = self.stop_watcher.local_request()
        if self._agreement is None:
            if local is None:
                return  # the common case: no stop asked, no store connection made
            self._agreement = StopAgreement(self.generation, self.world_size)
        agreed = self._agreement.stop_after(step, local)
        if agreed is None or step < agreed.last_step:
            return
        request = local or StopRequest(reason=agreed.reason, requested_unix_s=time.time())
        raise StopRun(
            self.acknowledge_stop(request, step), step, self.stop_watcher.signal_exit_code
        )

    @property
    def save_forced_at_stop(self) -> bool:
        """Whether the agreed stop is an operator's that saves at the stop step whatever
        checkpoint.save_on_stop says (protocol.OPERATOR_SAVING_STOPS: a stop with a save, a
        skipped shard, a pool move)."""
        asked = self.stop_request
        return asked is not None and asked.save and asked.reason in OPERATOR_SAVING_STOPS

    def acknowledge_stop(self, request: StopRequest, step: int) -> StopRequest:
        """Take the agreed stop: the controller's own request when there is one (a cancel's new
        fencing token reaches the ranks that only saw a flag), STOP_ACKNOWLEDGED once per rank."""
        request = self.stop_watcher.read_file() or request
        if request.fence_generation is not None:
            self.adopt_generation(request.fence_generation)
        self.stop_request = request
        self.event(
            EventType.STOP_ACKNOWLEDGED,
            step=step,
            reason=request.reason,
            save=request.save,
            event_id=f"g{self.generation}-r{self.rank}-stop",
        )
        return request

    def adopt_generation(self, generation: int) -> None:
        """Take the fencing token a cancel handed over: later events and the final checkpoint
        are written under it."""
        self.generation = generation
        self.channel.generation = generation
        for checkpointer in self._checkpointers:
            checkpointer.generation = generation

    def checkpointer(self, **kwargs: Any) -> "Checkpointer":
        """A `runwright.ckpt.Checkpointer` bound to this run: its fence, its generation, its
        event channel, and the spec's checkpoint policy (keyword arguments override). Pass
        `restore_probe=runwright.ckpt.ModelProbe(model, loss_on_a_fixed_batch)` so that every
        restore is validated before the first step (docs/ckpt.md, "Restore validation")."""
        from runwright.runtime.checkpoints import make_checkpointer

        checkpointer = make_checkpointer(self, **kwargs)
        self._checkpointers.append(checkpointer)
        return checkpointer

    def check_collectives(self, timeout_seconds: float | None = None) -> dict[str, Any]:
        """The collective preflight (runtime/collectives.py): call once right after
        `init_process_group`; raises `CollectiveCheckError` naming the ranks that did not arrive.
        The timeout defaults to the spec's `recovery.progress_timeout_seconds`."""
        from runwright.runtime.collectives import check_collectives

        return check_collectives(self, timeout_seconds)

    def all_reduce(self, tensor: Any, op: Any = None, group: Any = None, **detail: Any) -> None:
        """`torch.distributed.all_reduce`, recorded in the collective log with `detail` (e.g.
        `label="loss_tokens"`), so a hang in it is attributed (runtime/collective_hooks.py)."""
        collective_hooks.all_reduce(tensor, op, group, **detail)

    def step_loop(
        self, start_step: int, total_steps: int, spike_factor: float | None = None
    ) -> StepLoop:
        """Iterate steps start_step+1..total_steps, stopping early at a boundary on request."""
        return StepLoop(self, start_step, total_steps, spike_factor=spike_factor)

    def should_skip(self, step: int) -> bool:
        return any(first <= step <= last for first, last in self.skip_steps)

    def start_heartbeat(self, interval_seconds: float) -> None:
        def beat() -> None:
            while not self._stop_heartbeat.wait(interval_seconds):
                self.channel.heartbeat()

        self.channel.heartbeat()
        self._heartbeat = threading.Thread(target=beat, name="runwright-heartbeat", daemon=True)
        self._heartbeat.start()

    @property
    def completed(self) -> bool:
        """The run's last planned step is done and no stop cut it short."""
        plan = self.plan
        return (
            plan is not None
            and self.stop_request is None
            and self.last_step >= int(plan.total_steps.value)
        )

    def close(self) -> None:
        """End this process's part of the run (idempotent; also run at interpreter exit, so a
        script that never calls it still reports): every open loader reports its mixture, and
        rank 0 of a completed run sends TRAINING_COMPLETE with the digests of the parameters
        its checkpointer holds, which `runwright compare` checks bit for bit."""
        if self._closed:
            return
        self._closed = True
        try:
            events.run_closing()
            # Only a rank that ends in order reports: one torn down after a peer failed would
            # write under a generation the recovery has already fenced (a rejected stale write).
            if self.completed or self.stop_request is not None:
                self._peak_memory()
            if self.rank == 0 and self.completed:
                self._training_complete()
        finally:
            events.detach(self.report)
            self.stop_watcher.uninstall_signal_handler()
            self._stop_heartbeat.set()
            if self._heartbeat is not None:
                self._heartbeat.join(timeout=5)
            if self._trackers is not None:
                self._trackers.close(completed=self.completed)
            if self._system is not None:
                self._system.stop()
            if self._dumper is not None:
                self._dumper.close()
            self.channel.close()
            tracing.flush()

    def _peak_memory(self) -> None:
        from runwright.runtime.peak_memory import peak_memory_attributes

        device_type = self.spec.resources.device_type if self.spec else None
        self.event(
            EventType.RANK_PEAK_MEMORY,
            event_id=f"g{self.generation}-r{self.rank}-peak-memory",
            step=self.last_step,
            **peak_memory_attributes(self.rank, device_type),
        )

    def _training_complete(self) -> None:
        states = [c.last_state for c in self._checkpointers if c.last_state is not None]
        attributes: dict[str, Any] = {}
        if states:
            digests = states[-1].parameter_digests()
            RunPaths(self.run_dir).final_parameters.write_text(json.dumps(digests, indent=1))
            attributes["parameter_digests"] = digests
            if "tokens_seen" in states[-1].counters:
                attributes["tokens_seen"] = int(states[-1].counters["tokens_seen"])
        self.event(
            EventType.TRAINING_COMPLETE,
            step=self.last_step,
            event_id=f"g{self.generation}-complete",
            **attributes,
        )
