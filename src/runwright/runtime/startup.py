"""`runwright.runtime.init()`: how a training process joins its run.

Under the control plane the executor passes the run's identity through environment variables
(the ENV_* names of `runwright.protocol`) and torchrun adds RANK/LOCAL_RANK/WORLD_SIZE. Under
plain `torchrun` or `python train.py` the same call works with local defaults: a fresh local run
id, generation 0, and a run folder `<root>/local/<run_id>/` (runwright.layout), or
RUNWRIGHT_RUN_DIR if set. The context it builds is runtime/context.py's.
"""

import atexit
import json
import os
import platform
import socket
import uuid
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

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
    check_version,
    decode_rank_manifest,
    decode_skip_steps,
    placed_entry,
)
from runwright.runtime import collective_hooks
from runwright.runtime.channel import ChannelWriter
from runwright.runtime.context import RunContext
from runwright.runtime.standby import await_activation
from runwright.runtime.stop import StopWatcher
from runwright.spec import load_spec, spec_from_mapping
from runwright.spec.elastic import plan_at_world

DEFAULT_HEARTBEAT_SECONDS = 2.0
"""The heartbeat interval under plain torchrun without a spec (the spec's default)."""


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
