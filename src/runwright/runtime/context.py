"""`runwright.runtime.init()`: the run context inside a training process.

Under the control plane the executor passes the run's identity through environment variables
(the ENV_* names of `runwright.protocol`) and torchrun adds RANK/LOCAL_RANK/WORLD_SIZE. Under
plain `torchrun` or `python train.py` the same call works with local defaults: a fresh local run
id, generation 0, and a run folder `<root>/local/<run_id>/` (runwright.layout), or
RUNWRIGHT_RUN_DIR if set.
"""

import atexit
import json
import os
import platform
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright import events
from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.layout import RunPaths, local_run_paths, resolve_root
from runwright.lifetime import die_with_parent, has_tags
from runwright.protocol import (
    ENV_GENERATION,
    ENV_NODE,
    ENV_PROTOCOL_VERSION,
    ENV_RANK_MANIFEST,
    ENV_RUN_DIR,
    ENV_RUN_ID,
    ENV_SKIP_STEPS,
    ENV_SPEC_FILE,
    OPERATOR_SAVING_STOPS,
    RankEntry,
    StopRequest,
    check_version,
    decode_rank_manifest,
    decode_skip_steps,
    placed_entry,
)
from runwright.runtime import collective_hooks, tracing
from runwright.runtime.channel import ChannelWriter
from runwright.runtime.standby import await_activation
from runwright.runtime.steploop import StepLoop
from runwright.runtime.stop import StopAgreement, StopRun, StopWatcher
from runwright.spec import JobSpec, ResolvedPlan, load_spec, spec_from_mapping
from runwright.spec.elastic import plan_at_world

if TYPE_CHECKING:
    from runwright.ckpt import Checkpointer
    from runwright.observe.trackers import TrackerSink
    from runwright.runtime.system_sampler import SystemSampler

DEFAULT_HEARTBEAT_SECONDS = 2.0


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


def _torch_version() -> str | None:
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise RunwrightError(f"environment variable {name}={raw!r} must be an integer") from None


def _die_with_torchrun() -> None:
    """A managed rank started by torchrun dies with it (SIGKILL), so a killed torchrun or
    supervisor leaves no rank training without its agent. torchrun forks ranks from its main
    thread, which lives as long as torchrun. Set here rather than before exec because torchrun,
    not runwright, starts the ranks; a torchrun already gone by now is caught by the check: the
    parent must carry this generation's launch tags (torchrun inherits them from the
    supervisor), which init or a subreaper, re-parenting an orphan, does not."""
    if os.environ.get("TORCHELASTIC_RUN_ID") is None:
        return  # not a torchrun worker (e.g. a process the user started by hand)
    tags = {k: os.environ.get(k, "") for k in (ENV_RUN_DIR, ENV_GENERATION)}
    # An orphan's new parent is init (unreadable to other users) or an untagged subreaper;
    # torchrun runs as the same user, so its environment is readable.
    die_with_parent(lambda ppid: has_tags(ppid, tags))


def init(heartbeat: bool = True, spec_path: str | Path | None = None) -> RunContext:
    """Build this process's run context, announce the worker, and start heartbeats.

    The context becomes the process's event hook, so the loader and the checkpointer report to
    this run, and it closes itself at interpreter exit if the script does not.
    `spec_path` gives the job spec under plain torchrun; under the control plane the executor
    passes the submitted spec and this argument is ignored."""
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    run_id = os.environ.get(ENV_RUN_ID)
    managed = run_id is not None
    if managed:
        check_version(_env_int(ENV_PROTOCOL_VERSION, 1), "the controller that started this process")
        _die_with_torchrun()
        await_activation(rank)  # a warm standby's rank waits here, its imports done
        run_dir = Path(os.environ.get(ENV_RUN_DIR, "."))
        generation = _env_int(ENV_GENERATION, 0)
    else:
        # Plain torchrun: every rank must agree on the id without talking, so derive it from
        # the rendezvous that torchrun already shares.
        # RUNWRIGHT_RUN_DIR names a stable folder, so a restarted script finds its checkpoints.
        seed = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("MASTER_PORT") or ""
        run_id = f"local-{seed or uuid.uuid4().hex[:12]}"
        if os.environ.get(ENV_RUN_DIR):
            run_dir = Path(os.environ[ENV_RUN_DIR])
            run_id = f"local-{run_dir.name}"
        else:
            run_dir = local_run_paths(resolve_root(), run_id).folder
        generation = 0
    spec = None
    spec_file = os.environ.get(ENV_SPEC_FILE)
    if spec_file:
        spec = spec_from_mapping(json.loads(Path(spec_file).read_text()), spec_file)
    elif spec_path is not None:
        spec = load_spec(spec_path)
    # Where this rank really runs: the node whose agent started it (the executor says which),
    # else torchrun's node rank; under c10d either may differ from the manifest's launch order.
    group_rank = _env_int("GROUP_RANK", -1)
    node = _env_int(ENV_NODE, group_rank)
    host = socket.gethostname()
    entry = None
    manifest_file = os.environ.get(ENV_RANK_MANIFEST)
    if manifest_file:
        entries = decode_rank_manifest(Path(manifest_file).read_text())
        entry = placed_entry(entries, rank, node=None if node < 0 else node, host=host)
    skip = decode_skip_steps(os.environ.get(ENV_SKIP_STEPS))
    watcher = StopWatcher(run_dir, generation)
    watcher.install_signal_handler()
    ctx = RunContext(
        stop_watcher=watcher,
        skip_steps=skip,
        run_id=run_id,
        generation=generation,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        run_dir=run_dir,
        spec=spec,
        rank_entry=entry,
        channel=ChannelWriter(RunPaths(run_dir).channel, generation, rank),
        managed=managed,
    )
    # Before WORKER_STARTED gives the controller this pid to ask for dumps (SIGUSR1).
    ctx._dumper = collective_hooks.install_dumper(run_dir, generation, rank)
    ctx.event(
        EventType.WORKER_STARTED,
        event_id=f"g{generation}-r{rank}-started",
        pid=os.getpid(),
        local_rank=local_rank,
        host=host,
        # The node whose agent started this rank and torchrun's rank of that node: the
        # controller corrects the run's rank manifest with them (c10d assigns node ranks).
        node=entry.node if entry is not None else (None if node < 0 else node),
        group_rank=None if group_rank < 0 else group_rank,
        # The environment this rank actually runs in, for the run report's evidence chain.
        python_version=platform.python_version(),
        torch_version=_torch_version(),
        platform=platform.platform(),
    )
    if heartbeat:
        interval = spec.recovery.heartbeat_interval_seconds if spec else DEFAULT_HEARTBEAT_SECONDS
        ctx.start_heartbeat(interval)
    from runwright.runtime.system_sampler import start_system_sampler

    ctx._system = start_system_sampler(
        ctx, entry.node if entry is not None else (None if node < 0 else node)
    )
    events.attach(ctx.report)
    atexit.register(ctx.close)
    if rank == 0 and spec is not None and spec.observability.trackers.switched_on:
        from runwright.observe.trackers import open_trackers

        dp = int(plan_at_world(spec, world_size).dp.value or 1)
        ctx._trackers = open_trackers(spec, run_id, generation, run_dir, dp)
    return ctx
