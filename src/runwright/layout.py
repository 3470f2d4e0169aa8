"""Where runwright keeps things on disk: the root, each run's folder, each generation's attempt,
each dataset. This module is the one place those paths are spelled out. The controller side
(control/, cli/, govern/, demo/) and the worker side (runtime/) both import it, so neither
learns the other's file names. It imports nothing of runwright, so every layer may use it.

`<root>` is `--root`, else `$RUNWRIGHT_ROOT`, else `./.runwright` (`resolve_root`).

```
<root>/state.db                          embedded store (SQLite), unless --store names another
<root>/node_health.json                  hosts' GPU health readings, gating the inventory
<root>/datasets/<dataset_id>/            a built dataset: manifest.json, shards, stats, quarantine/
<root>/datasets/recipes/                 recipes kept beside the datasets they built (the demo's)
<root>/datasets/.work/<recipe_key>/      a build in progress: finished partitions, markers
<root>/drills/<drill_id>/                a fault drill: drill.json, drill.html (runwright drill)
<root>/ladders/<ladder_id>/              a scale-up ladder: ladder.json, ladder.html
<root>/baselines/<name>/                 a baseline: baseline.json, check-<time>/check.json
<root>/experiments/<name>.json           an experiment of an earlier version (now in the store)
<root>/local/<run_id>/                   a run started without the control plane (plain torchrun)
<root>/releases/<project>/<model>/v<N>/ a release's export, gated (govern/release.py)
<root>/runs/<run_id>/                    one run, laid out as follows (RunPaths)
  spec.json                              the submitted spec, canonical JSON
  controller.log                         the detached controller's output (submit --detach)
  checkpoints/                           checkpoint root: fence files, staging/, <step>-<ckpt_id>/
  channel/gen<G>-rank<R>.jsonl           worker -> controller messages, one file per rank
  control/stop-gen<G>.json               controller -> workers: stop generation G
  timeline/gen<G>-rank<R>.jsonl          per-step phase times, one file per rank
  final_parameters.json                  parameter digests once the last step is done
  attempts/gen<G>/                       generation G's worker group (AttemptPaths)
    pid                                  supervisor pid and launch time (unix seconds)
    standby                              a warm standby: supervisor pid, start, env (JSON; no pid)
    activate.json                        the controller's activation of that standby
    ready-rank<R>                        rank R of the standby has imported and waits
    agents.json                          what the supervisor runs: one torchrun agent per node
    supervisor.log                       the supervisor's own output
    exit_status                          the group's exit status, written by the supervisor
    node_exits.json                      each node's agent exit status, in the order they ended
    rank_manifest.json                   the rank manifest the group was launched with
    nodes/node<N>/                       node N's torchrun agent (NodePaths)
      torchrun.log                       the agent's own output
      ranks/                             its --log-dir: each local rank's stdout, stderr, error file
      tmp/                               its agent's and ranks' TMPDIR, removed as the run ends
      node.json                          a cluster node agent's record (its host, ranks, exit)
    launch.json                          a cluster launch request: generation G in allocation N
    srun.log                             the cluster launcher's output (Slurm's srun)
  allocations/req<N>/                    the run's N-th allocation request (AllocationPaths)
    job.json                             the engine's id for it (Slurm job id) and how it was asked
    claim                                taken (O_EXCL) before the request reaches the engine
    token                                a nonce every node must read back: the folder is shared
    agent.json                           the in-allocation agent's state (ready, hosts, failure)
    agent.log                            the agent's output (Slurm's --output)
    probe/<host>.json                    each node's answer to the shared-folder check
    release                              the controller's request that the agent end
  diagnostics/gen<G>/bundle.json         failure evidence of generation G
  diagnostics/gen<G>/guard-step<S>-rank<R>.json  a rank's capture of a step a guard refused
  diagnostics/gen<G>/rank<R>-collectives.json   rank R's collectives and phase (SIGUSR1, exit)
  diagnostics/gen<G>/rank<R>-stacks.txt  rank R's Python stacks (faulthandler, SIGUSR1)
  diagnostics/gen<G>/rank<R>-nccl-trace.pkl   rank R's NCCL Flight Recorder dump
  report/                                report.json and report.html (runwright report)
```

`<G>`, `<R>` and `<N>` are zero-padded to five digits (`gen00003-rank00001`, `node00001`), so
names sort in order. A generation launched before per-node folders existed has its one agent's
`torchrun.log` and `ranks/` directly in `attempts/gen<G>/` (`AttemptPaths.node_paths` reads both).
A spec's `checkpoint.location` moves a run's checkpoint root out of its folder, to
`<location>/<run_id>` (a folder or `s3://bucket/prefix/<run_id>`): `checkpoint_root` is the one
resolution. Inside the checkpoint root the layout belongs to the checkpoint protocol
(`runwright.ckpt`), which works on any checkpoint root, under a run or not.
"""

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT_ENV = "RUNWRIGHT_ROOT"
DEFAULT_ROOT = ".runwright"
ROOT_HELP = "runwright root folder (default: $RUNWRIGHT_ROOT, else ./.runwright)."
"""The one help text of every command's `--root`."""

RANK_FILE_GLOB = "gen*-rank*.jsonl"
"""Matches every per-rank file of `channel/` and `timeline/`."""
_GENERATION_NAME = re.compile(r"gen(\d+)")
_NODE_NAME = re.compile(r"node(\d+)")


def resolve_root(root: str | os.PathLike[str] | None = None) -> Path:
    """`root` (a command's `--root`), else $RUNWRIGHT_ROOT, else `./.runwright`; absolute."""
    chosen = root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    return Path(chosen).expanduser().resolve()


def generation_name(generation: int) -> str:
    """`gen00003`: the folder and file-name part of generation 3."""
    return f"gen{generation:05d}"


def parse_generation(name: str) -> int | None:
    """The generation a `gen<G>` folder name stands for; None for any other name."""
    match = _GENERATION_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def node_name(node: int) -> str:
    """`node00001`: the folder of node 1's agent in a generation."""
    return f"node{node:05d}"


def parse_node(name: str) -> int | None:
    """The node a `node<N>` folder name stands for; None for any other name."""
    match = _NODE_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def rank_file_name(generation: int, rank: int) -> str:
    """`gen00003-rank00001.jsonl`: one rank's file in `channel/` or `timeline/`."""
    return f"{generation_name(generation)}-rank{rank:05d}.jsonl"


def store_file(root: Path) -> Path:
    """The embedded store's SQLite file."""
    return root / "state.db"


def node_health_file(root: Path) -> Path:
    """The hosts' GPU health readings the scheduler's inventory is gated by
    (control/node_health.py)."""
    return root / "node_health.json"


def datasets_dir(root: Path) -> Path:
    return root / "datasets"


def dataset_dir(root: Path, dataset_id: str) -> Path:
    """A built dataset's folder, named by its content address."""
    return datasets_dir(root) / dataset_id


def dataset_work_dir(root: Path, recipe_key: str) -> Path:
    """A build's scratch folder, named by its recipe's hash, so a rerun finds what it finished."""
    return datasets_dir(root) / ".work" / recipe_key


def recipes_dir(root: Path) -> Path:
    """Recipes kept beside the datasets they built."""
    return datasets_dir(root) / "recipes"


def runs_dir(root: Path) -> Path:
    return root / "runs"


def drills_dir(root: Path) -> Path:
    """Fault drills' reports (`runwright drill`), one folder per drill."""
    return root / "drills"


def ladders_dir(root: Path) -> Path:
    """Scale-up ladders' reports (`runwright ladder`), one folder per ladder."""
    return root / "ladders"


def baselines_dir(root: Path) -> Path:
    """Regression baselines (`runwright baseline`), one folder per name."""
    return root / "baselines"


def baseline_dir(root: Path, name: str) -> Path:
    """Baseline `name`'s folder: baseline.json and each check's folder."""
    return baselines_dir(root) / name


def experiments_dir(root: Path) -> Path:
    """Experiments an earlier version kept as files (read into the store on first use)."""
    return root / "experiments"


def release_dir(root: Path, project: str, name: str, version: int | str) -> Path:
    """The export of version `version` of model `name` in `project` (the model registry's)."""
    return root / "releases" / project / name / f"v{version}"


@dataclass(frozen=True)
class NodePaths:
    """The files of one node's torchrun agent in a generation, `attempts/gen<G>/nodes/node<N>/`."""

    folder: Path
    node: int

    @property
    def torchrun_log(self) -> Path:
        """The agent's own output (its failure summary names each failed rank's global rank)."""
        return self.folder / "torchrun.log"

    @property
    def rank_logs(self) -> Path:
        """torchrun's `--log-dir`: `<rdzv id>_<random>/attempt_0/<local rank>/std{out,err}.log`
        and error files, keyed by the rank's LOCAL rank on this node."""
        return self.folder / "ranks"

    @property
    def tmp(self) -> Path:
        """The TMPDIR of the agent and its ranks (torchrun's and Python's temporary files), so
        the run owns its temporary files and the cleaner removes them (control/cleaner.py)."""
        return self.folder / "tmp"

    @property
    def record(self) -> Path:
        """A cluster node agent's record (executors/slurm_node.py): the engine's name for the
        node, its ranks' global ranks and pids, and torchrun's exit status. The local executor's
        supervisor keeps the same facts in the attempt's agents.json and node_exits.json."""
        return self.folder / "node.json"


@dataclass(frozen=True)
class AttemptPaths:
    """The files of one generation's worker group, `<run>/attempts/gen<G>/`."""

    folder: Path
    generation: int

    @property
    def pid_file(self) -> Path:
        """`<supervisor pid> <launch unix seconds>`; its presence marks a launched generation."""
        return self.folder / "pid"

    @property
    def standby_file(self) -> Path:
        """A warm standby started for this generation before it was launched (JSON: supervisor
        pid, start unix seconds, launch env; executors/standby.py); the pid file follows at its
        activation."""
        return self.folder / "standby"

    @property
    def activation_file(self) -> Path:
        """The standby's activation (protocol.Activation), which its waiting ranks read."""
        return self.folder / "activate.json"

    def standby_ready_file(self, rank: int) -> Path:
        """Written by a standby's rank once its imports are done and it waits."""
        return self.folder / f"ready-rank{rank:05d}"

    @property
    def agents_file(self) -> Path:
        """The supervisor's plan: each node's agent command, host and tags (supervise.py)."""
        return self.folder / "agents.json"

    @property
    def supervisor_log(self) -> Path:
        return self.folder / "supervisor.log"

    @property
    def exit_status_file(self) -> Path:
        """The group's exit status, written by the supervisor (control/supervise.py) once every
        agent ended: 0 only if every agent's was 0, else that of the first agent that failed."""
        return self.folder / "exit_status"

    @property
    def node_exits_file(self) -> Path:
        """Each agent's exit status in the order they ended, written just before the exit
        status."""
        return self.folder / "node_exits.json"

    @property
    def rank_manifest_file(self) -> Path:
        return self.folder / "rank_manifest.json"

    @property
    def nodes(self) -> Path:
        return self.folder / "nodes"

    def node(self, node: int) -> NodePaths:
        return NodePaths(self.nodes / node_name(node), node)

    def node_paths(self) -> list[NodePaths]:
        """Every node folder the generation has, in node order. A generation launched before
        per-node folders existed kept its one agent's files in the attempt folder: node 0."""
        if self.nodes.is_dir():
            found = (parse_node(p.name) for p in self.nodes.iterdir())
            return [self.node(n) for n in sorted(n for n in found if n is not None)]
        legacy = NodePaths(self.folder, 0)
        if legacy.torchrun_log.exists() or legacy.rank_logs.exists():
            return [legacy]
        return []

    @property
    def launch_file(self) -> Path:
        """A cluster executor's launch request (which allocation runs generation G, with what);
        its presence marks the generation launched, as `pid` does for a local group."""
        return self.folder / "launch.json"

    @property
    def launcher_log(self) -> Path:
        """The cluster launcher's own output (Slurm's `srun`)."""
        return self.folder / "srun.log"


@dataclass(frozen=True)
class AllocationPaths:
    """The files of one allocation request, `<run>/allocations/req<N>/`."""

    folder: Path
    request: int

    @property
    def job_file(self) -> Path:
        """The engine's id for the request (a Slurm job id) and the command that asked."""
        return self.folder / "job.json"

    @property
    def claim_file(self) -> Path:
        """Created exclusively before the request reaches the engine: one request, one job."""
        return self.folder / "claim"

    @property
    def token_file(self) -> Path:
        """A nonce each node reads back, proving it sees this folder, not a local copy."""
        return self.folder / "token"

    @property
    def agent_file(self) -> Path:
        """The in-allocation agent's state: ready with its hosts, or why it failed."""
        return self.folder / "agent.json"

    @property
    def agent_log(self) -> Path:
        return self.folder / "agent.log"

    @property
    def probe(self) -> Path:
        return self.folder / "probe"

    def probe_answer(self, host: str) -> Path:
        """Node `host`'s answer to the shared-folder check, holding the token it read."""
        return self.probe / f"{host}.json"

    @property
    def release_file(self) -> Path:
        """The controller asks the agent to end (the engine is told too)."""
        return self.folder / "release"


@dataclass(frozen=True)
class RunPaths:
    """The paths of one run's folder. Workers get the folder itself (RUNWRIGHT_RUN_DIR) and wrap
    it: `RunPaths(ctx.run_dir)`; the controller builds it from the root: `run_paths(root, id)`."""

    folder: Path

    @property
    def spec_file(self) -> Path:
        return self.folder / "spec.json"

    @property
    def controller_log(self) -> Path:
        return self.folder / "controller.log"

    @property
    def checkpoints(self) -> Path:
        """The default checkpoint root, inside the run folder. Find a run's checkpoint root with
        `checkpoint_root`, which honours the spec's `checkpoint.location`."""
        return self.folder / "checkpoints"

    @property
    def run_id(self) -> str:
        return self.folder.name

    @property
    def channel(self) -> Path:
        return self.folder / "channel"

    def channel_file(self, generation: int, rank: int) -> Path:
        return self.channel / rank_file_name(generation, rank)

    @property
    def control(self) -> Path:
        """Requests from the controller to the workers."""
        return self.folder / "control"

    def stop_file(self, generation: int) -> Path:
        return self.control / f"stop-{generation_name(generation)}.json"

    @property
    def timeline(self) -> Path:
        return self.folder / "timeline"

    def timeline_file(self, generation: int, rank: int) -> Path:
        return self.timeline / rank_file_name(generation, rank)

    @property
    def attempts(self) -> Path:
        return self.folder / "attempts"

    def attempt(self, generation: int) -> AttemptPaths:
        return AttemptPaths(self.attempts / generation_name(generation), generation)

    @property
    def allocations(self) -> Path:
        return self.folder / "allocations"

    def allocation(self, request: int) -> AllocationPaths:
        return AllocationPaths(self.allocations / f"req{request:05d}", request)

    @property
    def diagnostics(self) -> Path:
        return self.folder / "diagnostics"

    def diagnostics_dir(self, generation: int) -> Path:
        return self.diagnostics / generation_name(generation)

    def diagnostics_bundle(self, generation: int) -> Path:
        """Generation G's failure evidence (control/recovery.py `write_diagnostics`)."""
        return self.diagnostics_dir(generation) / "bundle.json"

    def guard_capture(self, generation: int, step: int, rank: int) -> Path:
        """Rank R's capture of step S, which a NaN/Inf or loss-spike guard refused
        (runtime/guard_capture.py); the escalation bundle gathers it."""
        return self.diagnostics_dir(generation) / f"guard-step{step:09d}-rank{rank:05d}.json"

    def guard_captures(self, generation: int, rank: int) -> list[Path]:
        """Rank R's guard captures in generation G, oldest step first."""
        return sorted(self.diagnostics_dir(generation).glob(f"guard-step*-rank{rank:05d}.json"))

    def collective_dump(self, generation: int, rank: int) -> Path:
        """Rank R's collective buffer, phase and stack tops (runtime/collective_log.py)."""
        return self.diagnostics_dir(generation) / f"rank{rank:05d}-collectives.json"

    def stack_dump(self, generation: int, rank: int) -> Path:
        """Rank R's Python stacks, written by faulthandler on the dump signal."""
        return self.diagnostics_dir(generation) / f"rank{rank:05d}-stacks.txt"

    def nccl_trace(self, generation: int, rank: int) -> Path:
        """Rank R's NCCL Flight Recorder dump (pickled, as torch writes it)."""
        return self.diagnostics_dir(generation) / f"rank{rank:05d}-nccl-trace.pkl"

    @property
    def report(self) -> Path:
        """Where `runwright report` (and the demo) writes report.json and report.html."""
        return self.folder / "report"

    @property
    def final_parameters(self) -> Path:
        """The parameter digests of a run that reached its last step (the context's close)."""
        return self.folder / "final_parameters.json"


def checkpoint_location(spec: Mapping[str, Any] | None) -> str | None:
    """`checkpoint.location` of a spec in its canonical (JSON) form, as the store keeps it and
    `spec.json` holds it; None when the spec has none."""
    section = (spec or {}).get("checkpoint") or {}
    location = section.get("location") if isinstance(section, Mapping) else None
    return str(location) if location else None


def checkpoint_root(paths: RunPaths, location: str | None) -> str:
    """The run's checkpoint root: `<location>/<run_id>` (a folder or a URL such as
    `s3://bucket/prefix/<run_id>`) when the spec sets `checkpoint.location`, else
    `<run folder>/checkpoints`. The one resolution: the controller, the workers, the store's
    fence and catalog, the CLI and the report all call it, so they agree on where a run's
    checkpoints are."""
    if not location:
        return str(paths.checkpoints)
    base = location if location == "/" else location.rstrip("/")
    return f"{base.rstrip('/')}/{paths.run_id}"


RUN_ID_MAX_CHARS = 200
"""Longest run id (or prefix) accepted; generated ids are at most 63 characters."""
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def validate_run_id(run_id: str) -> str:
    """`run_id` itself when it is a plain name that can be (a prefix of) a run id, else ValueError
    saying why. Run ids name folders under `<root>/runs/`, so one given by a user must not climb
    out of it or name another: letters, digits, `.`, `_`, `-`, starting with a letter or digit
    (which rules out `/`, `..`, NUL and the empty string), at most RUN_ID_MAX_CHARS long."""
    if not run_id:
        raise ValueError("a run id cannot be empty; `runwright list` shows the runs")
    if len(run_id) > RUN_ID_MAX_CHARS:
        raise ValueError(
            f"a run id is at most {RUN_ID_MAX_CHARS} characters, got {len(run_id):,}; "
            "`runwright list` shows the runs"
        )
    if not _RUN_ID.fullmatch(run_id):
        raise ValueError(
            f"{run_id!r} is not a run id: use letters, digits, `.`, `_` and `-`, starting with "
            "a letter or digit (no `/`, no `..`); `runwright list` shows the runs"
        )
    return run_id


def run_paths(root: Path, run_id: str) -> RunPaths:
    """A run under the control plane: `<root>/runs/<run_id>/`."""
    return RunPaths(runs_dir(root) / run_id)


def local_run_paths(root: Path, run_id: str) -> RunPaths:
    """A run started without the control plane (plain torchrun): `<root>/local/<run_id>/`."""
    return RunPaths(root / "local" / run_id)
