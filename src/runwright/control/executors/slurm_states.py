"""How Slurm's job states and pending reasons map onto runwright's allocation states (pure).

- PENDING, CONFIGURING, REQUEUED, REQUEUE_HOLD, RESIZING, SUSPENDED: pending; the run stays in
  ALLOCATING with Slurm's reason in words (`waiting in Slurm partition debug: Resources (the nodes
  are busy), 2 nodes requested`). BadConstraints, InvalidAccount and InvalidQOS never clear:
  failed for good.
- RUNNING while the job's agent checks the nodes: pending; once it is ready: granted
  (ALLOCATION_READY, the rank manifest, STARTING); if a node cannot see the run folder: failed
  for good, naming the path and the fix.
- COMPLETING, COMPLETED, CANCELLED, FAILED, TIMEOUT, PREEMPTED, OUT_OF_MEMORY, DEADLINE: failed;
  a run that held it requeues with a new request.
- NODE_FAIL, BOOT_FAIL: failed, naming the nodes Slurm reports lost; the failure is node_lost
  and the next request excludes them.

Sources: https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES and
https://slurm.schedmd.com/job_reason_codes.html.
"""

PENDING_STATES = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED"}
)
RUNNING_STATES = frozenset({"RUNNING", "SIGNALING", "STOPPED"})
"""The allocation holds its nodes (STOPPED: its processes are stopped; the watchdog sees that)."""
LOST_NODE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})

ENDED_WORDS = {
    "COMPLETING": "is ending (Slurm is releasing its nodes)",
    "COMPLETED": "ended (its agent exited)",
    "CANCELLED": "was cancelled (scancel, or an administrator)",
    "FAILED": "failed (its batch script exited non-zero)",
    "TIMEOUT": "reached its time limit",
    "PREEMPTED": "was preempted by Slurm",
    "NODE_FAIL": "lost a node (NODE_FAIL)",
    "BOOT_FAIL": "could not boot a node (BOOT_FAIL)",
    "OUT_OF_MEMORY": "ran out of memory",
    "DEADLINE": "reached its deadline",
    "REVOKED": "was revoked (federation)",
    "SPECIAL_EXIT": "ended with a special exit",
    "STAGE_OUT": "is staging out",
}
PENDING_STATE_WORDS = {
    "CONFIGURING": "its nodes are booting",
    "REQUEUED": "requeued by Slurm",
    "REQUEUE_FED": "requeued by Slurm",
    "REQUEUE_HOLD": "requeued and held by Slurm",
    "RESIZING": "being resized",
    "SUSPENDED": "suspended by Slurm",
}

PENDING_REASONS = {
    "Resources": "the nodes are busy",
    "Priority": "jobs of higher priority are ahead of it",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "NodeDown": "a node it needs is down",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows now",
    "PartitionTimeLimit": "its time limit exceeds the partition's",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "BeginTime": "its start time has not come",
    "Dependency": "it waits for another job",
    "JobHeldUser": "held by its user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "QOSMaxNodePerJobLimit": "its QoS allows fewer nodes per job",
    "QOSGrpNodeLimit": "its QoS's node share is in use",
    "AssocGrpNodeLimit": "the account's node share is in use",
    "AssocMaxJobsLimit": "the account runs its maximum number of jobs",
    "Reservation": "it waits for its reservation",
    "BadConstraints": "no node satisfies its constraints",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QoS is not valid",
    "None": "it has just been queued",
}
HOPELESS_REASONS = frozenset({"BadConstraints", "InvalidAccount", "InvalidQOS"})
"""Pending reasons that no wait resolves: the request fails for good with the reason."""


def pending_words(partition: str, state: str, reason: str, nodes: int) -> str:
    """`waiting in Slurm partition debug: Resources (the nodes are busy), 2 nodes requested`."""
    why = PENDING_REASONS.get(reason) or PENDING_STATE_WORDS.get(state) or ""
    code = reason if reason and reason != "None" else state
    text = f"{code} ({why})" if why else code
    noun = "node" if nodes == 1 else "nodes"
    return (
        f"waiting in Slurm partition {partition or '(default)'}: {text}, {nodes} {noun} requested"
    )


def ended_words(job_id: str, state: str, reason: str) -> str:
    what = ENDED_WORDS.get(state, f"ended {state}")
    extra = f" ({reason})" if reason and reason not in ("None", "") else ""
    return f"Slurm job {job_id} {what}{extra}"


def is_pending(state: str) -> bool:
    return state in PENDING_STATES


def is_running(state: str) -> bool:
    return state in RUNNING_STATES


def is_hopeless(state: str, reason: str) -> bool:
    return state == "PENDING" and reason in HOPELESS_REASONS


def is_lost_node_state(node_state: str) -> bool:
    """A node `sinfo` reports lost: down, not responding (`*`), failing or failed."""
    state = node_state.lower()
    return state.endswith("*") or state.startswith(("down", "fail", "boot_fail", "unk"))
