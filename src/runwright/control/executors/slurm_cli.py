"""Slurm's command-line clients, and the pure reading of what they print.

The Slurm executor talks to the cluster only through its documented clients (`sbatch`, `squeue`,
`scontrol`, `sinfo`, `scancel`, and `sacct` where accounting is on), so it needs no library and
works from any host that can reach `slurmctld`. Everything that reads their output is a pure
function here (node lists, job records, the job-state and pending-reason tables), tested without
a cluster.

Job states and pending reasons: https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES
and https://slurm.schedmd.com/job_reason_codes.html.
"""

import re
import shutil
import subprocess
from dataclasses import dataclass

from runwright.errors import LaunchError

SLURM_COMMAND_SECONDS = 30.0
"""How long one client call may take before the executor gives up on it (slurmctld busy or
unreachable); MessageTimeout is 10 s by default and a client retries a few times."""


class SlurmError(LaunchError):
    """A Slurm client failed (not installed, slurmctld unreachable, the request refused)."""


def have_slurm() -> bool:
    """The clients the executor needs are on PATH."""
    return all(shutil.which(c) for c in ("sbatch", "squeue", "scontrol", "scancel", "sinfo"))


def run(argv: list[str], timeout_seconds: float = SLURM_COMMAND_SECONDS) -> str:
    """A client's stdout; SlurmError with its stderr when it fails."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_seconds, check=False
        )
    except FileNotFoundError:
        raise SlurmError(
            f"{argv[0]} is not installed on this host: install Slurm's clients (Debian: "
            "slurm-client) and point them at the cluster (SLURM_CONF or /etc/slurm/slurm.conf)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"`{' '.join(argv)}` did not answer in {timeout_seconds:g} s: is slurmctld up and "
            "reachable from this host?"
        ) from None
    if done.returncode != 0:
        raise SlurmError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.stdout}")
    return done.stdout


# -- node lists ---------------------------------------------------------------------------------
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compact host list (`n[1-3,5],gpu-[01-02]`) as names, in order; what
    `scontrol show hostnames` prints, without a call. One bracket group per name."""
    names: list[str] = []
    for part in _split_top(text.strip()):
        if not part:
            continue
        if "[" not in part:
            names.append(part)
            continue
        prefix, _, rest = part.partition("[")
        body, _, suffix = rest.partition("]")
        for item in body.split(","):
            match = _RANGE.match(item.strip())
            if match is None:
                raise ValueError(f"cannot read Slurm node list {text!r} at {item!r}")
            first, last = match.group(1), match.group(2) or match.group(1)
            width = len(first)
            for number in range(int(first), int(last) + 1):
                names.append(f"{prefix}{number:0{width}d}{suffix}")
    return names


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


# -- jobs ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobInfo:
    """One job as Slurm reports it."""

    job_id: str
    state: str
    """Base state (`PENDING`, `RUNNING`, `NODE_FAIL`, ...), without a `+` suffix."""
    reason: str
    """The pending reason, or why it ended (`Resources`, `None`, `NodeDown`)."""
    nodes: tuple[str, ...]
    """Allocated nodes in Slurm's order (empty while pending)."""
    partition: str
    node_count: int


SQUEUE_FORMAT = "%i|%T|%r|%N|%P|%D"


def parse_squeue(text: str) -> list[JobInfo]:
    """`squeue -h -o SQUEUE_FORMAT` lines as records."""
    jobs = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 6:
            continue
        job_id, state, reason, nodelist, partition, count = fields[:6]
        jobs.append(
            JobInfo(
                job_id=job_id,
                state=state.split("+")[0].split()[0] if state else "",
                reason=reason,
                nodes=tuple(expand_nodelist(nodelist)) if nodelist and nodelist != "(null)" else (),
                partition=partition,
                node_count=int(count) if count.isdigit() else 0,
            )
        )
    return jobs


def parse_scontrol_job(text: str) -> JobInfo | None:
    """`scontrol -o show job ID` (one line of key=value pairs) as a record."""
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    if "JobId" not in fields:
        return None
    nodelist = fields.get("NodeList", "")
    return JobInfo(
        job_id=fields["JobId"],
        state=fields.get("JobState", ""),
        reason=fields.get("Reason", ""),
        nodes=tuple(expand_nodelist(nodelist)) if nodelist and nodelist != "(null)" else (),
        partition=fields.get("Partition", ""),
        node_count=int(fields.get("NumNodes", "0").split("-")[0] or 0),
    )


def parse_sacct(text: str) -> JobInfo | None:
    """`sacct -n -P -X -o JobID,State,Reason,NodeList,Partition,NNodes` (the allocation line)."""
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 6 and fields[0]:
            state = fields[1].split()[0] if fields[1] else ""  # "CANCELLED by 0"
            return JobInfo(
                job_id=fields[0],
                state=state,
                reason=fields[2],
                nodes=tuple(expand_nodelist(fields[3])) if fields[3] not in ("", "None") else (),
                partition=fields[4],
                node_count=int(fields[5]) if fields[5].isdigit() else 0,
            )
    return None


def query_job(job_id: str) -> JobInfo | None:
    """The job as slurmctld knows it (queued, running, or ended within MinJobAge), else as
    accounting recorded it (when `sacct` works), else None."""
    try:
        jobs = parse_squeue(
            run(["squeue", "-h", "--states=all", "-j", job_id, "-o", SQUEUE_FORMAT])
        )
    except SlurmError as exc:
        if "Invalid job id" not in str(exc):
            raise
        jobs = []
    if jobs:
        return jobs[0]
    try:
        return parse_sacct(
            run(
                [
                    "sacct",
                    "-n",
                    "-P",
                    "-X",
                    "-j",
                    job_id,
                    "-o",
                    "JobID,State,Reason,NodeList,Partition,NNodes",
                ]
            )
        )
    except SlurmError:
        return None  # no accounting on this cluster: the job is simply gone


def jobs_named(name: str) -> list[JobInfo]:
    """Every job slurmctld still knows with this name, in any state."""
    return parse_squeue(run(["squeue", "-h", "--states=all", "-n", name, "-o", SQUEUE_FORMAT]))


def steps_of(job_id: str) -> dict[str, str]:
    """step name -> step id (`12.3`) of the job's running steps."""
    text = run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j"])
    found = {}
    for line in text.splitlines():
        step_id, _, name = line.strip().partition("|")
        if step_id and name:
            found[name] = step_id
    return found


def node_states(names: list[str]) -> dict[str, str]:
    """node -> its state as `sinfo` prints it (`idle`, `alloc`, `down*`, `drain`)."""
    if not names:
        return {}
    text = run(["sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N|%T"])
    return dict(line.strip().split("|", 1) for line in text.splitlines() if "|" in line)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    cpus: int
    gres: str
    state: str


def partition_nodes(partition: str | None) -> list[NodeInfo]:
    """The partition's nodes (the default partition's for None)."""
    argv = ["sinfo", "-h", "-N", "-o", "%N|%c|%G|%T|%P"]
    if partition:
        argv += ["-p", partition]
    nodes: dict[str, NodeInfo] = {}
    for line in run(argv).splitlines():
        fields = line.strip().split("|")
        if len(fields) < 5:
            continue
        if partition is None and not fields[4].endswith("*"):
            continue  # the default partition is marked with `*`
        cpus = int(fields[1]) if fields[1].isdigit() else 0
        nodes[fields[0]] = NodeInfo(fields[0], cpus, fields[2], fields[3])
    return list(nodes.values())


def gres_count(gres: str, name: str) -> int:
    """How many of GRES `name` a node's `%G` field (`gpu:a100:4(S:0-1),nic:1`) declares."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == name and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def node_address(name: str) -> str:
    """The address other nodes reach `name` at (its NodeAddr)."""
    fields = dict(re.findall(r"(\w+)=(\S*)", run(["scontrol", "-o", "show", "node", name])))
    return fields.get("NodeAddr") or fields.get("NodeHostName") or name
