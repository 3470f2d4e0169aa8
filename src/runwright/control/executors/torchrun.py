"""The torchrun command line of one node of a generation, shared by every executor.

One node runs one torchrun agent (`torch.distributed.run`), which starts `devices_per_node`
ranks. A one-node generation uses `--standalone` (a private rendezvous on a free port). A
generation of N nodes runs N agents that meet through c10d rendezvous, hosted by the first node's
agent (https://pytorch.org/docs/stable/elastic/run.html, "Rendezvous"):

- `--rdzv-id` names the generation (`<run_id>-g<generation>`), so agents of an older generation
  that are still alive can never join a newer one's rendezvous;
- `--rdzv-conf is_host=1|0` says which agent hosts the rendezvous store. torchrun otherwise decides
  by matching the endpoint's host name against its own, which every agent matches when several
  "nodes" share one machine (the local executor's multi-node mode, the one-host Slurm fixture);
- `--max-restarts 0`: torchrun never restarts the group on its own. Restarts are the
  controller's, so every one is classified, counted against its policy and recorded.

Under c10d the node rank (torchrun's GROUP_RANK, and so each rank's global RANK) is assigned by the
rendezvous from the sorted set of participants; `--node-rank` is honoured only by the static
backend (pytorch/pytorch#182223). A rank therefore learns its node from the environment torchrun
gives it, not from the order the executor started the agents in.
"""

import sys
from dataclasses import dataclass
from pathlib import Path

from runwright.errors import LaunchError
from runwright.spec import JobSpec

RDZV_JOIN_TIMEOUT_SECONDS = 900
"""How long an agent waits for the others at rendezvous before it gives up (c10d's
`join_timeout`, 600 s by default): long enough for a cluster to start every node's agent (image
pulls, slow file systems), after which a node that never came is a launch failure the controller
sees as the group's exit."""


@dataclass(frozen=True)
class Rendezvous:
    """Where the agents of one multi-node generation meet."""

    endpoint: str
    """`host:port` of the first node's rendezvous store."""
    run_id: str
    generation: int
    nodes: int

    @property
    def rdzv_id(self) -> str:
        return f"{self.run_id}-g{self.generation}"


def entrypoint_argv(spec: JobSpec, workdir: Path) -> list[str]:
    """`module:NAME` runs `python -m NAME`; a path resolves against the submit folder."""
    entry = spec.code.entrypoint
    if entry.startswith("module:"):
        return ["-m", entry.removeprefix("module:"), *spec.code.args]
    script = Path(entry)
    if not script.is_absolute():
        script = workdir / script
    if not script.is_file():
        raise LaunchError(
            f"code.entrypoint {entry!r} does not exist (looked for {script}); give a path "
            "relative to the spec's folder or `module:package.module`"
        )
    return [str(script), *spec.code.args]


def torchrun_argv(
    spec: JobSpec,
    workdir: Path,
    *,
    log_dir: Path,
    rendezvous: Rendezvous | None = None,
    hosts_rendezvous: bool = True,
    python: str = sys.executable,
) -> list[str]:
    """The command that runs one node's agent of a generation.

    `rendezvous` None runs a one-node group (`--standalone`); otherwise this agent joins the
    generation's c10d rendezvous, as its host when `hosts_rendezvous`."""
    argv = [python, "-m", "torch.distributed.run"]
    if rendezvous is None:
        argv += ["--standalone", "--nnodes", "1"]
    else:
        if rendezvous.nodes < 2:
            raise ValueError("a c10d rendezvous is for two or more nodes; use --standalone")
        conf = f"is_host={int(hosts_rendezvous)},join_timeout={RDZV_JOIN_TIMEOUT_SECONDS}"
        argv += [
            "--nnodes",
            str(rendezvous.nodes),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            rendezvous.endpoint,
            "--rdzv-id",
            rendezvous.rdzv_id,
            "--rdzv-conf",
            conf,
        ]
    argv += [
        "--nproc-per-node",
        str(spec.resources.devices_per_node),
        "--max-restarts",
        "0",
        "--log-dir",
        str(log_dir),
        "--redirects",
        "3",
        *entrypoint_argv(spec, workdir),
    ]
    return argv
