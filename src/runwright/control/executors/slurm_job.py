"""The agent inside a runwright Slurm job: `python -m runwright.control.executors.slurm_job`.

One allocation request of a run is one Slurm job, and this is its batch script. It runs on the
job's first node and lives as long as the allocation:

1. It checks that every node sees the run folder (`srun ... slurm_node probe`): the channel,
   heartbeats, stop requests and rank logs all travel through it, so a node that cannot see it
   would run ranks nobody hears. A failed check fails the allocation for good, naming the nodes,
   the path and the fix (`agent.json`).
2. It writes `agent.json` `ready` with the job's nodes in Slurm's order: the controller's
   ALLOCATION_READY.
3. It waits for the controller's launch request of a generation (`attempts/gen<G>/launch.json`
   naming this request), runs it as one `srun` step with one task per node (`slurm_node run`,
   c10d rendezvous hosted on this node at a free port), and writes, when the step ends, each
   node's exit (`node_exits.json`, as the local supervisor does) and the generation's exit
   status. Then it waits for the next generation: a restart in place reuses the
   allocation without queueing again.
4. A newer generation's request, or the controller's release, ends a step still running
   (`scancel --signal=KILL JOB.STEP`) before anything else starts, so two generations never run
   at once in one allocation. After a release it exits, and the job ends.

The controller never signals this process: it may run on any host, and it reads and writes only
files in the run folder and asks Slurm (`squeue`, `scancel`). SIGTERM here (a `scancel --full`,
the job's end) is noted and otherwise ignored: the step's ranks get their own and stop at a step
boundary, and the exit status is still written when the step ends.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runwright.control.executors import slurm_cli
from runwright.control.executors.slurm_node import write_json
from runwright.control.supervise import AgentExit, GroupExit, write_atomically, write_exit
from runwright.layout import AllocationPaths, AttemptPaths, RunPaths, parse_generation

POLL_SECONDS = 0.25
"""How often the agent looks for a launch request or a release (a listing of `attempts/`)."""
PROBE_SECONDS = 300.0
"""How long the shared-folder check may take on every node (a cold Python start on a slow
shared filesystem takes seconds)."""
STEP_KILL_SECONDS = 60.0
"""How long a killed step may take to end before the agent stops waiting for it."""


def srun_argv(nodes: int, name: str) -> list[str]:
    """One task per node of the allocation, none killed for another's bad exit: a failed rank
    ends its torchrun, whose peers then fail on their own and leave their evidence."""
    argv = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        f"--job-name={name}",
    ]
    cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    if cpus:
        argv.append(f"--cpus-per-task={cpus}")  # srun does not inherit sbatch's since 22.05
    return argv


def node_module(*args: str) -> list[str]:
    return [sys.executable, "-m", "runwright.control.executors.slurm_node", *args]


def combine(node_codes: dict[str, int | None], srun_code: int, batch_signalled: bool) -> int:
    """The generation's exit status: 0 only if every node's torchrun exited 0; else the first
    failing node's status (node order); else, when the batch step got SIGTERM while the step
    ran, -15: srun turns a SIGTERM it receives into SIGKILL for its step (Slurm's srun), so a
    `scancel --full` or `--batch` kills the ranks before they can save, a platform event and
    not the run's fault; else srun's own status (a node that left no status failed)."""
    failed = [code for code in node_codes.values() if code not in (0, None)]
    if failed:
        return int(failed[0])
    if all(code == 0 for code in node_codes.values()):
        return 0
    if batch_signalled:
        return -15
    return srun_code or 1


class Agent:
    def __init__(self, folder: Path, request: int) -> None:
        self.paths = AllocationPaths(folder, request)
        self.run = RunPaths(folder.parents[1])
        self.job_id = os.environ.get("SLURM_JOB_ID", "")
        self.hosts = slurm_cli.expand_nodelist(os.environ.get("SLURM_JOB_NODELIST", ""))
        self.state: dict[str, Any] = {
            "job_id": self.job_id,
            "hosts": self.hosts,
            "batch_node": os.environ.get("SLURMD_NODENAME", ""),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_unix_s": time.time(),
        }
        self.last_generation = 0
        self.sigterm_unix_s = 0.0
        """When the batch step last got SIGTERM (0: never)."""

    def report(self, state: str, **fields: Any) -> None:
        self.state.update(state=state, **fields)
        write_json(self.paths.agent_file, self.state)
        print(f"agent: {state} {fields or ''}", flush=True)

    # -- the shared-folder check ----------------------------------------------------------------

    def check_nodes(self) -> str | None:
        """None when every node sees the run folder; else what is wrong, in words."""
        argv = [
            *srun_argv(len(self.hosts), "rw-probe"),
            *node_module("probe", str(self.paths.folder)),
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_SECONDS)
            out, err = done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            out, err = "", f"the check did not finish in {PROBE_SECONDS:g} s"
        answers = {}
        for line in out.splitlines():
            if line.startswith("{"):
                answer = json.loads(line)
                answers[answer.get("node")] = answer
        token = self.paths.token_file.read_text().strip()
        problems = []
        for host in self.hosts:
            answer = answers.get(host)
            seen = self.paths.probe_answer(host)
            if answer is None:
                problems.append(f"{host} did not answer ({err.strip()[-300:] or 'no output'})")
            elif "error" in answer:
                problems.append(f"{host}: {answer['error']}")
            elif answer.get("token") != token:
                problems.append(f"{host} reads another folder at this path (wrong token)")
            elif not seen.exists() or json.loads(seen.read_text()).get("token") != token:
                problems.append(f"{host}'s answer does not appear here (not the same folder)")
        if not problems:
            return None
        return (
            f"node(s) cannot use the run folder {self.run.folder}: {'; '.join(problems)}. "
            "Every node must see the run folder at the same path (channel, heartbeats, stop "
            "requests and rank logs go through it): put --root (RUNWRIGHT_ROOT) on a "
            "filesystem every node mounts (NFS, Lustre, GPFS); see docs/control.md, "
            "'What multi-host needs'"
        )

    # -- generations ----------------------------------------------------------------------------

    def released(self) -> bool:
        return self.paths.release_file.exists()

    def next_launch(self) -> AttemptPaths | None:
        """The newest generation launched into this allocation and not yet run here."""
        if not self.run.attempts.is_dir():
            return None
        found = None
        for entry in self.run.attempts.iterdir():
            generation = parse_generation(entry.name)
            if generation is None or generation <= self.last_generation:
                continue
            attempt = self.run.attempt(generation)
            try:
                launch = json.loads(attempt.launch_file.read_text())
            except (OSError, ValueError):
                continue
            if launch.get("request") == self.paths.request and (
                found is None or generation > found.generation
            ):
                found = attempt
        return found

    def run_generation(self, attempt: AttemptPaths, address: str) -> None:
        generation = attempt.generation
        self.last_generation = generation
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        endpoint = f"{address}:{port}"
        name = f"rw-gen{generation:05d}"
        argv = [
            *srun_argv(len(self.hosts), name),
            *node_module("run", str(attempt.folder), endpoint),
        ]
        self.report("running", generation=generation, endpoint=endpoint)
        began = time.time()
        with open(attempt.launcher_log, "ab") as log:
            step = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        killed = False
        while step.poll() is None:
            newer = self.next_launch()
            if self.released() or newer is not None:
                self.kill_step(name, step)
                killed = True
                break
            time.sleep(POLL_SECONDS)
        code = step.wait()
        nodes: dict[str, int | None] = {}
        ended: list[tuple[float, AgentExit]] = []
        for slot, host in enumerate(self.hosts):
            try:
                record = json.loads(attempt.node(slot).record.read_text())
            except (OSError, ValueError):
                record = {}
            nodes[host] = record.get("exit_status")
            if nodes[host] is not None:
                ended.append(
                    (
                        float(record.get("ended_unix_s") or 0),
                        AgentExit(node=slot, exit_code=int(nodes[host]), stopped=killed),
                    )
                )
        status = combine(nodes, code, self.sigterm_unix_s >= began)
        # Each node's agent's exit in the order they ended, as the local supervisor records it
        # (supervise.GroupExit), so evidence and node-loss classification read both the same
        # way; a node that left no status of its own is missing from it (executors/slurm.py
        # asks Slurm about those).
        write_atomically(
            attempt.node_exits_file,
            GroupExit(
                exit_code=status, agents=[a for _, a in sorted(ended, key=lambda e: e[0])]
            ).model_dump_json(indent=1),
        )
        write_exit(attempt.exit_status_file, status)
        self.report("idle", generation=generation, exit_status=status, node_status=nodes)

    def kill_step(self, name: str, step: subprocess.Popen[bytes]) -> None:
        try:
            step_id = slurm_cli.steps_of(self.job_id).get(name)
            if step_id:
                slurm_cli.run(["scancel", "--signal=KILL", step_id])
        except slurm_cli.SlurmError as exc:
            print(f"agent: could not cancel step {name}: {exc}", flush=True)
        try:
            step.wait(timeout=STEP_KILL_SECONDS)
        except subprocess.TimeoutExpired:
            step.kill()

    def serve(self) -> int:
        self.report("checking")
        problem = self.check_nodes()
        if problem is not None:
            self.report("failed", reason=problem, permanent=True)
            return 3
        address = slurm_cli.node_address(self.hosts[0])
        self.report("ready", address=address)
        while not self.released():
            attempt = self.next_launch()
            if attempt is not None:
                self.run_generation(attempt, address)
            else:
                time.sleep(POLL_SECONDS)
        self.report("released")
        return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print(
            "usage: python -m runwright.control.executors.slurm_job FOLDER REQUEST", file=sys.stderr
        )
        return 2
    agent = Agent(Path(argv[0]).resolve(), int(argv[1]))

    def noted(_signum: int, _frame: object) -> None:
        # A SIGTERM to the batch script (scancel --full, the job's end) must not end the agent
        # before the step's exit status is written; Slurm's SIGKILL after KillWait still does.
        agent.sigterm_unix_s = time.time()
        print("agent: SIGTERM", flush=True)

    signal.signal(signal.SIGTERM, noted)
    return agent.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
