"""A real Slurm cluster on this host: `slurmctld` and one `slurmd` per node.

The nodes are n1, n2, n3 (partition `debug`, the default) with distinct ports and
NodeHostname=localhost, one CPU each: three, so that a 2-node run that loses a node restarts on
the two others (`--exclude`) instead of waiting for the lost one. A fourth node, n4, is in
partition `island` with n1 only, and is started on demand in a mount namespace of its own where
the tests' run folders are hidden under an empty tmpfs: a node that does not share the run
folder, as a cluster without a shared filesystem would have.

Timeouts are short so a lost node is noticed in seconds (SlurmdTimeout, MessageTimeout), a node
whose slurmd comes back rejoins by itself (ReturnToService=2), and the config is written into a
temporary folder; clients find it through SLURM_CONF, which the fixture sets for the session.
Authentication is auth/none where the installed Slurm has it (22.05, Debian 12) and munge
otherwise. Every daemon is stopped by its pid at the end, after checking that no job is left in
the queue.

The tests (conftest.py's `slurm_cluster`) and benchmarks/scale_out.py both use it.
"""

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

NODES = ("n1", "n2", "n3")
ISLAND = "n4"
PROGRAMS = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")
SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
STARTUP_SECONDS = 90.0
"""How long the daemons get to come up and register (a loaded 2-core machine)."""


def _which(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path=os.pathsep.join(SBIN))


def missing_slurm() -> str | None:
    """Why this host cannot run the test cluster, or None."""
    missing = [p for p in PROGRAMS if _which(p) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing); install Debian's slurm-wlm"
    if os.geteuid() != 0:
        return "the test cluster runs slurmctld and slurmd as root (SlurmUser=root)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _has_auth_none() -> bool:
    patterns = ("/usr/lib/*/slurm-wlm/auth_none.so", "/usr/lib*/slurm/auth_none.so",
                "/usr/local/lib*/slurm/auth_none.so")  # fmt: skip
    return any(glob.glob(p) for p in patterns)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(
        item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item
    )


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class SlurmCluster:
    """The config, the daemons and the few client calls the tests make."""

    def __init__(self, cpus_per_node: int = 1) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="runwright-slurm-"))
        self.conf = self.base / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.munged: subprocess.Popen[bytes] | None = None
        auth = "auth/none" if _has_auth_none() else "auth/munge"
        lines = [
            "ClusterName=runwright",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={_free_port()}",
            f"AuthType={auth}",
            f"CredType={'cred/none' if auth == 'auth/none' else 'cred/munge'}",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.base / 'state'}",
            f"SlurmdSpoolDir={self.base / 'spool-%n'}",
            f"SlurmctldPidFile={self.base / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.base / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.base / 'slurmctld.log'}",
            f"SlurmdLogFile={self.base / 'slurmd-%n.log'}",
            # A lost node is DOWN within seconds, and back when its slurmd registers again.
            "SlurmdTimeout=10",
            "MessageTimeout=5",
            "ResumeTimeout=10",
            "ReturnToService=2",
            "KillWait=10",
            "InactiveLimit=0",
            "MinJobAge=300",
            "SchedulerType=sched/backfill",
            *(
                f"NodeName={node} NodeHostname=localhost Port={_free_port()} CPUs={cpus_per_node}"
                for node in (*NODES, ISLAND)
            ),
            f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName=island Nodes=n1,{ISLAND} MaxTime=INFINITE State=UP",
        ]
        if auth == "auth/munge":
            # Newer Slurm has no auth/none: a munged of our own, on a socket of our own.
            socket_path = self.base / "munge.socket"
            lines.append(f"AuthInfo=socket={socket_path}")
            self.munged = subprocess.Popen(
                [_which("munged") or "munged", "--foreground", "--force",
                 f"--socket={socket_path}", f"--pid-file={self.base / 'munged.pid'}",
                 f"--log-file={self.base / 'munged.log'}", f"--seed-file={self.base / 'seed'}"],
            )  # fmt: skip
        (self.base / "state").mkdir()
        self.conf.write_text("\n".join(lines) + "\n")

    # -- daemons --------------------------------------------------------------------------------

    def _daemon(self, *argv: str) -> None:
        subprocess.run(argv, env=self.env, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        self._daemon(_which("slurmctld") or "slurmctld", "-f", str(self.conf))
        for node in NODES:
            self.start_node(node, wait=False)
        self.wait_nodes(NODES, "idle")

    def start_node(self, node: str, wait: bool = True) -> None:
        self._daemon(_which("slurmd") or "slurmd", "-f", str(self.conf), "-N", node)
        if wait:
            self.wait_nodes([node], "idle")

    @contextlib.contextmanager
    def island(self, hidden: Path) -> Iterator[str]:
        """Node n4 up, in a mount namespace where `hidden` is an empty tmpfs: jobs on it do not
        see what the other nodes see there. Stopped again at the end."""
        script = (
            f"mount -t tmpfs none {hidden} && exec {_which('slurmd')} -D -f {self.conf} -N {ISLAND}"
        )
        process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            self.wait_nodes([ISLAND], "idle")
            yield ISLAND
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            self._kill_node_processes(ISLAND)

    def wait_nodes(self, nodes, state: str, timeout_seconds: float = STARTUP_SECONDS) -> None:
        deadline = time.monotonic() + timeout_seconds
        seen = ""
        while time.monotonic() < deadline:
            seen = self.client("sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N %T")
            states = dict(line.split() for line in seen.splitlines() if line.strip())
            if all(states.get(n, "").rstrip("*") == state for n in nodes):
                return
            time.sleep(0.5)
        raise TimeoutError(f"nodes {list(nodes)} not {state} after {timeout_seconds:g} s: {seen}")

    def kill_node(self, node: str) -> list[int]:
        """What a node's failure looks like to the rest: its slurmd, its step daemons and every
        process of its job steps SIGKILLed at once. Returns the pids killed."""
        pids = []
        pid_file = self.base / f"slurmd-{node}.pid"
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(pid_file.read_text()))
        pids += self._kill_node_processes(node, also=pids)
        return pids

    def _kill_node_processes(self, node: str, also: list[int] = ()) -> list[int]:
        tasks = [
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit()
            and _environ(int(p)).get("SLURMD_NODENAME") == node
            and _environ(int(p)).get("SLURM_CONF") == str(self.conf)
        ]
        stepds = set()
        for task in tasks:
            parent = _parent(task)
            with contextlib.suppress(OSError):
                if parent and Path(f"/proc/{parent}/cmdline").read_bytes().startswith(
                    b"slurmstepd"
                ):
                    stepds.add(parent)
        doomed = sorted({*also, *stepds, *tasks})
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return doomed

    # -- clients --------------------------------------------------------------------------------

    def client(self, *argv: str) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr}")
        return done.stdout

    def queue(self) -> list[str]:
        """`JOBID STATE NAME` of every job slurmctld still has queued or running."""
        text = self.client("squeue", "-h", "-o", "%i %T %j")
        return [line.strip() for line in text.splitlines() if line.strip()]

    def wait_queue_empty(self, timeout_seconds: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_seconds
        while self.queue():
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs left in the Slurm queue: {self.queue()}")
            time.sleep(0.5)

    def job_state(self, job_id: str) -> str:
        text = self.client("squeue", "-h", "--states=all", "-j", job_id, "-o", "%T")
        return text.strip()

    # -- the end --------------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Cancel what is left (returned, for the caller's assertion), then stop every daemon."""
        left = []
        with contextlib.suppress(Exception):
            left = self.queue()
            if left:
                self.client("scancel", *[line.split()[0] for line in left])
        pids = []
        for pid_file in self.base.glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pids.append(int(pid_file.read_text()))
        for node in (*NODES, ISLAND):
            pids += self._kill_node_processes(node)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.munged is not None:
            self.munged.terminate()
            self.munged.wait(timeout=30)
        shutil.rmtree(self.base, ignore_errors=True)
        return left
