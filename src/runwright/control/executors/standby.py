"""Warm standby for the local executor: the next generation's group, started ahead of a failure.

Of the ~13 s a recovery took on a 2-core machine, ~10 s were starting processes: torchrun, each
rank's interpreter, `import torch` and the script's imports (issue 20). None of that depends on why
the group restarts, so it can be done before. With `recovery.warm_standby`, once a generation G
trains, the executor starts generation G+1's group exactly as a launch would (same supervisor,
agents, tags, logs, under `attempts/gen<G+1>/`), but with RUNWRIGHT_STANDBY set: each rank imports
what its script imports, then waits in `runtime.init` (runtime/standby.py) before it writes
anything. The standby has no pid file, so it is not a launched generation: nothing adopts, polls
or stops it as one, and generation G stays the only one that trains.

When G fails and the controller launches G+1, it activates the standby instead of starting
processes: it writes the activation (the launch environment that depends on the failure: skipped
steps, a rollback bound, pinned devices) and then the pid file, which makes the standby the
launched group of G+1. Whatever cannot be used (the standby died, or was started for other
devices) is discarded and G+1 is launched cold; so is every standby of a run that ends, pauses or
is requeued. A discarded standby's processes are killed (they hold no state) and its folder is
renamed `gen<G>.discarded-<ms>`, so a cold launch of G starts from a clean folder and the
evidence of G never mixes with the standby's logs.

What it costs: a second set of processes per rank, idle, holding their imports' memory (a few
hundred MB a rank with torch), and the CPU of their start while G trains. Local executor only:
a cluster engine would have to hold a second allocation for it.
"""

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright.control.processes import signal_all, wait_gone
from runwright.errors import LaunchError
from runwright.layout import AttemptPaths, parse_generation, run_paths
from runwright.protocol import RankEntry, encode_rank_manifest, write_activation

if TYPE_CHECKING:
    from runwright.control.executors.local import LocalExecutor
    from runwright.control.executors.local_group import WorkerGroup

KILLED_EXIT_SECONDS = 10.0
"""How long SIGKILLed standby processes get to leave the kernel (local.py's own bound)."""
DEVICE_ENV = "CUDA_VISIBLE_DEVICES"
"""Fixed per node when a standby's agents start: an activation for other devices cannot use it."""
_POPEN: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
"""(run folder, generation) -> the standby supervisor this process started, reaped here."""


def record(
    attempt: AttemptPaths, process: subprocess.Popen[bytes], started: float, env: dict[str, str]
) -> None:
    """Mark `attempt` as a standby (no pid file: not launched)."""
    _POPEN[(str(attempt.folder), attempt.generation)] = process
    body = {"pid": process.pid, "started_unix_s": started, "env": env}
    tmp = attempt.standby_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    tmp.replace(attempt.standby_file)


def _read(attempt: AttemptPaths) -> dict[str, Any] | None:
    try:
        body = json.loads(attempt.standby_file.read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and isinstance(body.get("pid"), int) else None


def prepare(executor: "LocalExecutor", **launch: Any) -> int | None:
    """Start `launch["generation"]`'s group as a standby, unless a live one is there (a dead
    one is discarded first); its supervisor pid when started now."""
    root, run_id, generation = launch["root"], launch["run_id"], launch["generation"]
    attempt = run_paths(root, run_id).attempt(generation)
    if attempt.pid_file.exists():
        return None  # launched already: nothing to prepare
    if attempt.standby_file.exists():
        group = _group(root, run_id, generation)
        if group is not None and group.poll() is None:
            return None
        _discard(root, run_id, generation)
    return executor.start_group(**launch, as_standby=True).pid


def _group(root: Path, run_id: str, generation: int) -> "WorkerGroup | None":
    from runwright.control.executors.local_group import WorkerGroup, generation_tags, nodes_of

    run = run_paths(root, run_id)
    attempt = run.attempt(generation)
    body = _read(attempt)
    if body is None:
        return None
    return WorkerGroup(
        generation=generation,
        pid=body["pid"],
        run=run,
        nodes=nodes_of(attempt),
        tags=generation_tags(root, run_id, generation),
        launched_unix_s=body.get("started_unix_s"),
        process=_POPEN.get((str(attempt.folder), generation)),
    )


def activate(
    root: Path,
    run_id: str,
    generation: int,
    rank_manifest: list[RankEntry],
    extra_env: dict[str, str],
) -> "WorkerGroup | str | None":
    """Make `generation`'s standby its launched group (its `ready_ranks` set); None when there
    is none; why not, in words, when there is one it cannot use (it is discarded)."""
    attempt = run_paths(root, run_id).attempt(generation)
    if attempt.pid_file.exists() or not attempt.standby_file.exists():
        return None
    group, body = _group(root, run_id, generation), _read(attempt)
    why = None
    if group is None or body is None:
        why = "its record is unreadable"
    elif group.poll() is not None:
        why = "its processes ended before it was activated"
    elif (body.get("env") or {}).get(DEVICE_ENV) != extra_env.get(DEVICE_ENV):
        why = f"it was started for other devices ({DEVICE_ENV})"
    if why is not None or group is None:
        _discard(root, run_id, generation)
        return why
    ready = len(list(attempt.folder.glob("ready-rank[0-9]*[0-9]")))
    attempt.rank_manifest_file.write_text(encode_rank_manifest(rank_manifest))
    write_activation(attempt.activation_file, generation, extra_env)
    activated = time.time()
    attempt.pid_file.write_text(f"{group.pid} {activated}\n")  # launched: adoptable from now
    group.launched_unix_s = activated
    group.ready_ranks = ready
    return group


def discard(root: Path, run_id: str) -> list[int]:
    """Kill every standby of the run that was not launched; the generations discarded."""
    paths = run_paths(root, run_id)
    if not paths.attempts.is_dir():
        return []
    gone = []
    for folder in sorted(paths.attempts.iterdir()):
        generation = parse_generation(folder.name)
        if generation is None:
            continue
        attempt = paths.attempt(generation)
        if attempt.standby_file.exists() and not attempt.pid_file.exists():
            _discard(root, run_id, generation)
            gone.append(generation)
    return gone


def _discard(root: Path, run_id: str, generation: int) -> None:
    """Kill a standby's processes (by tag, so re-parented ones too), reap its supervisor if
    this process started it, and move its folder aside."""
    from runwright.control.executors.local_group import generation_processes

    attempt = run_paths(root, run_id).attempt(generation)
    body = _read(attempt)
    doomed = list(generation_processes(root, run_id).get(generation, []))
    if body is not None:
        doomed.append(int(body["pid"]))
    signal_all(doomed, signal.SIGKILL)
    process = _POPEN.pop((str(attempt.folder), generation), None)
    if process is not None:
        process.wait(timeout=30)
    survivors = wait_gone(doomed, KILLED_EXIT_SECONDS)
    if survivors:
        raise LaunchError(
            f"standby processes {survivors} of generation {generation} survived SIGKILL for "
            f"{KILLED_EXIT_SECONDS:g} s; nothing starts beside them: see /proc/<pid>/stack"
        )
    if attempt.folder.exists():
        aside = f"{attempt.folder.name}.discarded-{int(time.time() * 1000)}"
        attempt.folder.rename(attempt.folder.with_name(aside))
