"""One node's part of a Slurm allocation: `python -m runwright.control.executors.slurm_node`.

The allocation's agent (slurm_job.py) starts this on every node with `srun`, one task per node:

- `probe ALLOCATION_FOLDER`: prove this node sees the run folder itself, not a local copy at the
  same path: read the allocation's token (a nonce the controller wrote) and write it back under
  `probe/<node>.json`, which the agent on the first node must then see. Prints one JSON line.
- `run ATTEMPT_FOLDER ENDPOINT`: run this node's torchrun agent of the generation whose launch
  request is in ATTEMPT_FOLDER, joining the c10d rendezvous at ENDPOINT (hosted by node 0), with
  the files every executor's node agent has (layout.NodePaths, `nodes/node<N>/`: N is the node's
  slot in the allocation, its index in the launch request's hosts), and record in its node.json
  the engine's name for the node, its ranks' global ranks and pids (read from this node's /proc),
  and torchrun's exit status. Ranks get their node's index as RUNWRIGHT_NODE, as under the local
  executor, so ingest places them in the rank manifest the same way (protocol.placed_entry).

Signals: Slurm sends SIGTERM to every process of the step before a time limit (`--signal`), on a
preemption or `scancel --signal=TERM`. The ranks must see it and stop at a step boundary; torchrun
must not: its own handler sends the ranks a second SIGTERM at once (a rank's "stop now, unsaved")
and exits non-zero, so the steps since the last checkpoint would be lost. So
torchrun starts with SIGTERM ignored and left out of its `--signals-to-handle` (an option: torchrun
overwrites the TORCHELASTIC_SIGNALS_TO_HANDLE environment variable with it), the ranks
install their own handler (runtime/stop.py), and a SIGTERM this process gets becomes the
generation's stop request file (reason `preemption`), which covers process trackers that signal
only the task without sending the ranks a second SIGTERM (a rank's "stop now, unsaved").
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from runwright.control.credentials import scoped_environment
from runwright.control.executors.torchrun import Rendezvous, torchrun_argv
from runwright.control.processes import processes_tagged
from runwright.layout import AllocationPaths, AttemptPaths, NodePaths, parse_generation
from runwright.lifetime import die_with_pid, environ_of
from runwright.protocol import (
    ENV_GENERATION,
    ENV_NODE,
    ENV_RUN_DIR,
    ENV_SPEC_FILE,
    write_stop_request,
)
from runwright.spec import spec_from_mapping

RANK_DISCOVERY_SECONDS = 0.5
"""How often the node agent looks in /proc for its ranks until it has found them all."""
TORCHRUN_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"
"""The signals torchrun handles itself under Slurm: not SIGTERM (see the module docstring)."""


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Atomically, and synced: another node reads it over the shared filesystem."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(value, indent=1))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def node_identity() -> tuple[str, int]:
    """(Slurm's name for this node, its index in the step)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname(), int(
        os.environ.get("SLURM_NODEID", "0")
    )


def node_slot(name: str, step_index: int, hosts: list[str]) -> int:
    """This node's slot in the allocation: its place in the launch request's hosts (the job's
    nodes in Slurm's order, which is also the step's), else Slurm's index of it in the step."""
    return hosts.index(name) if name in hosts else step_index


def probe(folder: Path) -> int:
    """Answer the agent's shared-folder check; the exit status says whether this node passed."""
    node, node_id = node_identity()
    answer: dict[str, Any] = {"node": node, "node_id": node_id, "host": socket.gethostname()}
    paths = AllocationPaths(folder, 0)
    try:
        answer["token"] = paths.token_file.read_text().strip()
        paths.probe.mkdir(exist_ok=True)
        write_json(paths.probe_answer(node), answer)
    except OSError as exc:
        answer["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(answer), flush=True)
    return 0 if "error" not in answer else 3


def rank_map(tags: dict[str, str]) -> dict[int, dict[str, int]]:
    """local rank -> {rank, group_rank, pid} of this node's live ranks, from their environment."""
    found: dict[int, dict[str, int]] = {}
    for pid in processes_tagged(tags):
        env = environ_of(pid) or {}
        if env.get("LOCAL_RANK", "").isdigit() and env.get("RANK", "").isdigit():
            found[int(env["LOCAL_RANK"])] = {
                "rank": int(env["RANK"]),
                "group_rank": int(env.get("GROUP_RANK", "0") or 0),
                "pid": pid,
            }
    return found


def start_torchrun(
    argv: list[str], workdir: Path, env: dict[str, str], log: IO[bytes]
) -> subprocess.Popen[bytes]:
    """This node's torchrun, started with SIGTERM ignored (see the module docstring; `argv` must
    also leave SIGTERM out of `--signals-to-handle`, or torchrun installs its handler anyway) and
    ended with this process."""
    me = os.getpid()

    def child_setup() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        die_with_pid(me)

    return subprocess.Popen(
        argv,
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=child_setup,
    )


def run(attempt_folder: Path, endpoint: str) -> int:
    """This node's torchrun for the generation; returns (and records) its exit status."""
    generation = parse_generation(attempt_folder.name)
    assert generation is not None, attempt_folder
    attempt = AttemptPaths(attempt_folder, generation)
    launch = json.loads(attempt.launch_file.read_text())
    name, step_index = node_identity()
    node = node_slot(name, step_index, list(launch.get("hosts") or []))
    paths: NodePaths = attempt.node(node)
    paths.folder.mkdir(parents=True, exist_ok=True)
    # The allocation inherited the controller's environment: scoped credentials replace it.
    env = scoped_environment({**os.environ, **launch["env"], ENV_NODE: str(node)})
    spec = spec_from_mapping(json.loads(Path(env[ENV_SPEC_FILE]).read_text()), "the run's spec")
    nodes = int(launch["nodes"])
    rendezvous = Rendezvous(endpoint, launch["run_id"], generation, nodes) if nodes > 1 else None
    argv = torchrun_argv(
        spec,
        Path(launch["workdir"]),
        log_dir=paths.rank_logs,
        rendezvous=rendezvous,
        hosts_rendezvous=node == 0,
        python=sys.executable,
        signals_to_handle=TORCHRUN_SIGNALS,
    )
    record: dict[str, Any] = {
        "node": node,
        "name": name,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "step_id": f"{os.environ.get('SLURM_JOB_ID', '')}.{os.environ.get('SLURM_STEP_ID', '')}",
        "endpoint": endpoint,
        "started_unix_s": time.time(),
        "ranks": {},
        "exit_status": None,
    }
    write_json(paths.record, record)
    tags = {ENV_RUN_DIR: env[ENV_RUN_DIR], ENV_GENERATION: str(generation), ENV_NODE: str(node)}

    def forward(_signum: int, _frame: object) -> None:
        # Not a second SIGTERM to the ranks: Slurm usually signalled them too, and a rank takes
        # a second one as "stop now, unsaved" (runtime/stop.py). The stop file asks every rank
        # of the generation to stop at the agreed step boundary and save, whoever got a signal.
        write_stop_request(Path(env[ENV_RUN_DIR]), generation, "preemption")

    with open(paths.torchrun_log, "ab") as log:
        child = start_torchrun(argv, Path(launch["workdir"]), env, log)
    signal.signal(signal.SIGTERM, forward)
    expected = spec.resources.devices_per_node
    while True:
        try:
            code = child.wait(timeout=RANK_DISCOVERY_SECONDS)
            break
        except subprocess.TimeoutExpired:
            if len(record["ranks"]) < expected:
                found = rank_map(tags)
                if len(found) > len(record["ranks"]):
                    record["ranks"] = {str(k): v for k, v in sorted(found.items())}
                    write_json(paths.record, record)
    record.update(exit_status=code, ended_unix_s=time.time())
    write_json(paths.record, record)
    return code


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "probe":
        return probe(Path(argv[1]))
    if len(argv) == 3 and argv[0] == "run":
        return run(Path(argv[1]), argv[2])
    print(
        "usage: python -m runwright.control.executors.slurm_node probe ALLOCATION_FOLDER | "
        "run ATTEMPT_FOLDER ENDPOINT",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
