"""Recovery starts with classification (seed 003): turn what a failed generation left behind into
one failure class, the first failing rank, and a signature that says whether it repeats.

Evidence, strongest first: the watchdog's verdict (hang / no progress), the workers' own events
(NAN_DETECTED, STOP_ACKNOWLEDGED for a preemption), torchrun's per-rank error files written by
`torch.distributed.elastic.multiprocessing.errors.record` (the earliest timestamp is the rank that
failed first, not the last one to time out), the root-cause exit code torchrun logged (a rank
killed by a signal), what the executor found of a group whose supervisor was lost, and finally
the group's own exit status. Everything but the workers' events and the exit status reaches
`classify` as the executor's `FailureEvidence` record (executors/protocol.py); this module reads
no file of the group's itself.

An exception raised by runwright's own platform code (a checkpoint error, a store error, an
OSError inside the checkpoint or runtime packages) is the platform's fault, not the user's: it is
`storage` or `infrastructure`, never `user_code` (`platform_fault`, control/error_kinds.py).
"""

import re
import signal
from typing import Any

from runwright.control.error_kinds import DETERMINISTIC, PATTERNS, exception_line, platform_fault
from runwright.control.executors.protocol import EXIT_LOST, FailureEvidence, NodeExit
from runwright.records import Record
from runwright.spec import FailureClass

ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
# Every failure block of torchrun's summary (root cause and the others).
FAILURE_BLOCK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*exitcode\s*:\s*(-?\d+)")


class Classification(Record):
    """The verdict on one failed generation."""

    failure_class: FailureClass
    rank: int | None
    """The first failing rank, when known."""
    message: str
    step: int | None
    """The last healthy step of the failed generation."""
    signature: str
    """Equal signatures mean the same failure again (class, error and step)."""
    evidence: str
    """Which evidence decided the class."""
    node: int | None = None
    """The node the failure is pinned on (a lost node), when known."""
    host: str | None = None
    """That node's host."""
    error_lines: tuple[str, ...] = ()
    """The root-cause rank's last lines of its error output (its traceback's end, or what it
    printed to stderr before exiting), so `submit`, `status` and the report show the cause where
    the user looks, not only in the diagnostics bundle."""

    @property
    def deterministic(self) -> bool:
        return self.failure_class in DETERMINISTIC


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


ERROR_LINES = 12
"""How many of the root-cause rank's last error-output lines a classification carries."""
_LAUNCHER_NOISE = re.compile(r"^\[?[WIE]\d{4} |torch\.distributed\.elastic|^\s*$")
"""torchrun's own log lines interleaved in a rank's stderr, and blank lines: not the rank's."""


def error_lines(evidence: FailureEvidence, rank: int | None) -> tuple[str, ...]:
    """The last ERROR_LINES lines `rank` wrote to stderr (its traceback's end, or the message of
    a `sys.exit("...")`), from the executor's log tails; () when none were kept."""
    if rank is None:
        return ()
    own = f"rank{rank}/stderr.log"
    text = next(
        (t for name, t in evidence.log_tails.items() if name == own or name.endswith("/" + own)),
        "",
    )
    if not text and rank in evidence.rank_tracebacks:
        text = evidence.rank_tracebacks[rank]
    lines = [line.rstrip() for line in text.splitlines() if not _LAUNCHER_NOISE.search(line)]
    return tuple(line[:500] for line in lines[-ERROR_LINES:])


def lost_node(node_exits: tuple[NodeExit, ...]) -> NodeExit | None:
    """The node of a multi-node group whose agent died by a signal nobody in the group sent (the
    first such, in the order the agents ended): the node itself went (killed, crashed, its
    machine gone), taking its ranks with it. One node's agent killed by a signal is the
    launcher's fault, not evidence of a node (`classify`'s last rules): only beside surviving
    peers does an agent's death single out a node."""
    if len(node_exits) < 2:
        return None
    return next((n for n in node_exits if n.exit_code < 0 and not n.stopped), None)


def _signature(cls: FailureClass, text: str, step: int | None) -> str:
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    # Numbers that change between attempts (pids, addresses) must not hide a repeat.
    normalised = re.sub(r"0x[0-9a-f]+|\b\d{4,}\b", "#", first_line)[:200]
    return f"{cls}|{normalised}|step={step}"


def classify(
    *,
    exit_code: int | None,
    watchdog_class: FailureClass | None,
    watchdog_detail: str,
    watchdog_rank: int | None,
    nan_rank_step: tuple[int, int] | None,
    preempted: bool,
    evidence: FailureEvidence,
    last_step: int | None,
    ranks_started: int,
    world_size: int,
    preempted_killed: bool = False,
    spike: dict[str, Any] | None = None,
) -> Classification:
    """`evidence` is what the executor read of the ended group (`Executor.evidence`); its `lost`
    is what the executor found and did when the supervisor ended without an exit status
    (exit_code EXIT_LOST). `preempted_killed`: the preempted group was killed after its stop
    grace rather than stopping at a boundary. `spike`: the LOSS_SPIKE that names
    `nan_rank_step` (a finite loss the spike guard refused), None for a non-finite one."""

    def verdict(
        cls: FailureClass,
        rank: int | None,
        message: str,
        evidence_text: str,
        step: int | None = last_step,
    ) -> Classification:
        return Classification(
            failure_class=cls,
            rank=rank,
            message=message,
            step=step,
            signature=_signature(cls, message, step),
            evidence=evidence_text,
            error_lines=error_lines(evidence, rank),
        )

    # A node the engine reports lost (down, not responding) that left no exit status is the
    # cause; its peers' errors ("connection closed") and their silence are symptoms of it.
    if evidence.lost_hosts:
        hosts = ", ".join(evidence.lost_hosts)
        return verdict(
            FailureClass.NODE_LOST,
            None,
            f"node {hosts} was lost",
            f"executor: node {hosts} left no exit status and its engine reports it down",
        ).model_copy(update={"host": hosts})
    # A rank that stopped on a non-finite loss falls silent and its peers block in the next
    # collective: on a busy machine the watchdog can call that a hang before torchrun reports
    # the exit. The rank's own NAN_DETECTED is the cause; the silence is its symptom.
    nan_explains_it = nan_rank_step is not None and watchdog_class is FailureClass.HANG
    if watchdog_class is not None and not nan_explains_it:
        return verdict(watchdog_class, watchdog_rank, watchdog_detail, "watchdog")
    if preempted:
        killed = preempted_killed
        return verdict(
            FailureClass.PREEMPTION,
            None,
            "preempted: the group could not stop at a step boundary within its stop grace and "
            "was killed; it resumes from its last committed checkpoint"
            if killed
            else "SIGTERM: the group stopped at a step boundary for a preemption",
            "STOP_GRACE_EXPIRED event" if killed else "STOP_ACKNOWLEDGED event",
        )
    if nan_rank_step is not None:
        rank, step = nan_rank_step
        if spike is not None:
            return verdict(
                FailureClass.NAN_INF,
                rank,
                f"loss spike at step {step}: loss {spike.get('loss')} over "
                f"training.loss_spike.threshold_ratio {spike.get('threshold_ratio')} x the mean "
                f"{spike.get('mean')} of the last {spike.get('window_steps')} steps (rollback)",
                "LOSS_SPIKE event",
                step=step,
            )
        return verdict(
            FailureClass.NAN_INF,
            rank,
            f"non-finite loss or gradient at step {step}",
            "NAN_DETECTED event",
            step=step,
        )
    gone = lost_node(evidence.node_exits)
    if gone is not None:
        # The other nodes' ranks fail after it, typically with a gloo "Connection closed by
        # peer": victims of the lost node, not the root cause, even when their error files are
        # the only ones there.
        victims = sorted({e.rank for e in evidence.error_records} - set(gone.ranks))
        seen = [f"node {n.node}: {n.exit_code}" for n in evidence.node_exits]
        first = next((e for e in evidence.error_records if e.rank in victims), None)
        # Whether the other nodes' ranks leave error files is a race: a rank that meets the
        # closed connection first records it; one its own agent stops first records nothing.
        after = (
            f"; ranks {victims} of the other nodes failed after it (victims: {first.message})"
            if first is not None
            else "; no rank of the other nodes left an error record"
        )
        return verdict(
            FailureClass.NODE_LOST,
            min(gone.ranks) if gone.ranks else None,
            f"node {gone.node} (host {gone.host}) was lost: its torchrun agent was killed by "
            f"{_signal_name(-gone.exit_code)} with ranks {list(gone.ranks)}",
            f"agent exit statuses in the order they ended: {', '.join(seen)}{after}",
        ).model_copy(update={"node": gone.node, "host": gone.host})
    torchrun_log = evidence.launcher_log
    lost = evidence.lost
    root = ROOT_CAUSE.search(torchrun_log)
    root_rank = int(root.group(1)) if root else None
    root_code = int(root.group(2)) if root else None
    # torchrun's root cause is the first rank observed failing; a rank killed by a signal leaves
    # no error file, and the other ranks' errors ("Connection closed by peer") are symptoms.
    # torchrun SIGTERMs the survivors of a failed rank and may report them in the same pass,
    # even as the "root cause": a SIGKILLed rank anywhere in its report is the real cause.
    failures = [(int(r), int(c)) for r, c in FAILURE_BLOCK.findall(torchrun_log)]
    killed = next((rank for rank, code in failures if code == -9), None)
    if killed is not None:
        return verdict(
            FailureClass.NODE_LOST,
            killed,
            f"rank {killed} was killed (SIGKILL)",
            "torchrun failure report: exit code -9",
        )
    if root_code == -15 and all(code == -15 for _, code in failures):
        return verdict(
            FailureClass.PREEMPTION,
            root_rank,
            f"rank {root_rank} got SIGTERM",
            "torchrun root cause exit code -15",
        )
    errors = evidence.error_records
    # The root-cause rank's own error file; without a root cause, the earliest one.
    first = next((e for e in errors if e.rank == root_rank), None)
    if first is None and root is None and errors:
        first = errors[0]
    if first is not None:
        text = f"{first.message}\n{first.traceback}"
        for cls, pattern in PATTERNS:
            if pattern.search(text):
                return verdict(cls, first.rank, first.message, "torchrun error file")
        platform = platform_fault(first.message, first.traceback)
        if platform is not None:
            cls, where = platform
            return verdict(
                cls, first.rank, first.message, f"torchrun error file: {first.message} ({where})"
            )
        return verdict(FailureClass.USER_CODE, first.rank, first.message, "torchrun error file")
    if exit_code == EXIT_LOST:
        if lost is not None and not lost.node_restarted:
            # The executor's own fault, repaired by killing the group: not the run's node.
            return verdict(FailureClass.INFRASTRUCTURE, None, lost.message, lost.evidence)
        return verdict(
            FailureClass.NODE_LOST,
            None,
            lost.message
            if lost
            else "the worker group's supervisor vanished without an exit status",
            lost.evidence if lost else "supervisor exit file missing",
        )
    tracebacks = evidence.rank_tracebacks
    if root is not None:
        rank, code = int(root.group(1)), int(root.group(2))
        trace = tracebacks.get(rank, "")
        said = error_lines(evidence, rank)
        message = exception_line(trace) or (
            f"rank {rank} exited with code {code}: {said[-1]}"
            if said
            else f"rank {rank} exited with code {code}"
        )
        for cls, pattern in PATTERNS:
            if pattern.search(message):
                return verdict(cls, rank, message, "torchrun root cause")
        platform = platform_fault(message, trace) if trace else None
        if platform is not None:
            cls, where = platform
            return verdict(cls, rank, message, f"torchrun root cause: {message} ({where})")
        if ranks_started < world_size and rank not in tracebacks:
            return verdict(
                FailureClass.INFRASTRUCTURE,
                rank,
                f"{message} before every rank started",
                "torchrun root cause before start-up finished",
            )
        return verdict(FailureClass.USER_CODE, rank, message, "torchrun root cause")
    if tracebacks:
        rank = min(tracebacks)
        message = exception_line(tracebacks[rank])
        for cls, pattern in PATTERNS:
            if pattern.search(message):
                return verdict(cls, rank, message, "rank stderr traceback")
        platform = platform_fault(message, tracebacks[rank])
        if platform is not None:
            cls, where = platform
            return verdict(cls, rank, message, f"rank stderr traceback: {message} ({where})")
        return verdict(FailureClass.USER_CODE, rank, message, "rank stderr traceback")
    if exit_code is not None and exit_code < 0:
        # torchrun itself died by a signal (a failed rank makes it exit 1, not negative): the
        # launcher was killed from outside, and its ranks died with it.
        name = _signal_name(-exit_code)
        return verdict(
            FailureClass.INFRASTRUCTURE,
            None,
            f"torchrun was killed by {name}",
            f"supervisor exit file: torchrun exit status {exit_code} ({name})",
        )
    if ranks_started < world_size:
        return verdict(
            FailureClass.INFRASTRUCTURE,
            None,
            f"the worker group exited with {exit_code} before every rank started",
            "launch",
        )
    return verdict(
        FailureClass.USER_CODE, None, f"the worker group exited with {exit_code}", "exit status"
    )
