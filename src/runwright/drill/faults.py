"""The fault matrix: one entry per fault a drill injects (docs/drill.md).

An entry says, in words, how the fault is injected; which injector does it (drill/injectors.py:
signals, a trainer fault knob, file corruption, a stale process, a killed controller, all from
outside the training processes); the spec its run uses (the drill's spec, or that spec with a
knob or a second node); and what the platform must make of it: the terminal state, the failure
class, the action, and whether the run must end bitwise-equal to the fault-free reference.

The expected outcome is read from the spec's own recovery policy, so a spec that says
`recovery.on_nan: fail` or gives a class `max_retries: 0` expects the run to stop, and a drill of
it passes when it does. Adding a fault is one `Fault` in `FAULTS` plus its injector.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runwright.control.error_kinds import DETERMINISTIC
from runwright.drill import injectors, shard_damage, storage
from runwright.events import EventType
from runwright.records import Record
from runwright.spec import FailureClass, JobSpec, spec_from_mapping

REFERENCE_TRAINER = "module:runwright.train"
"""The entrypoint whose fault knobs (`--nan-at-step`, `--block-at-step`) the knob faults use."""


class Expected(Record):
    """What the platform must make of one fault on one spec."""

    state: str
    """Terminal state the run must end in: SUCCEEDED, FAILED or CANCELLED."""
    terminal_reason: str | None = None
    """Its terminal reason when the run must stop (FAILED_PERMANENT, PREEMPTED, ...)."""
    failure_class: str | None
    """The class the controller must give the failure; None when no failure is classified (the
    fault is handled without stopping the group: an adoption, a rejected write)."""
    action: str
    """restart, requeue, adopt, reject, fail or stop."""
    bitwise: bool
    """Whether the run must end bitwise-equal to the fault-free reference (False where the policy
    changes what is trained, as a skipped NaN batch, or where the run stops)."""
    fallback: bool = False
    """Whether a restore must refuse a checkpoint and fall back to an older one."""


def after_failure(cls: FailureClass, spec: JobSpec, action: str = "restart") -> Expected:
    """A classified failure handled per the spec's recovery policy (docs/control.md, "Failure
    -> recovery"), read from the spec, not from the controller's code: recovered with `action`
    and bitwise-equal, or stopped where the policy allows no retry (on_nan: fail, the class's
    max_retries: 0, or max_total_restarts: 0 for a class that spends the error budget)."""
    if cls is FailureClass.NAN_INF and spec.recovery.on_nan == "fail":
        return Expected(
            state="FAILED",
            terminal_reason="FAILED_PERMANENT",
            failure_class=cls,
            action="fail",
            bitwise=False,
        )
    policy = spec.recovery.policy_for(cls)
    if policy.max_retries == 0:
        if cls is FailureClass.PREEMPTION:
            return Expected(
                state="CANCELLED",
                terminal_reason="PREEMPTED",
                failure_class=cls,
                action="stop",
                bitwise=False,
            )
        terminal = "FAILED_PERMANENT" if cls in DETERMINISTIC else "FAILED_RECOVERABLE"
        return Expected(
            state="FAILED",
            terminal_reason=terminal,
            failure_class=cls,
            action="fail",
            bitwise=False,
        )
    if policy.consumes_error_budget and spec.recovery.max_total_restarts == 0:
        return Expected(
            state="FAILED",
            terminal_reason="FAILED_RECOVERABLE",
            failure_class=cls,
            action="fail",
            bitwise=False,
        )
    # A NaN's batch is skipped (on_nan: rollback_skip): the run trains on one batch fewer than
    # the reference, so it must differ from it.
    bitwise = cls is not FailureClass.NAN_INF
    return Expected(state="SUCCEEDED", failure_class=cls, action=action, bitwise=bitwise)


def handled_live(action: str) -> Callable[[JobSpec], Expected]:
    """A fault the platform handles while the group trains on: no failure, bitwise-equal."""
    return lambda _spec: Expected(
        state="SUCCEEDED", failure_class=None, action=action, bitwise=True
    )


def after_save_failure(spec: JobSpec) -> Expected:
    """A save storage refused: `checkpoint.on_save_failure: skip` trains on (the save recorded
    as CHECKPOINT_FAILED, nothing lost, bitwise-equal); `stop` fails the group as `storage`."""
    if spec.checkpoint.on_save_failure == "skip":
        return Expected(state="SUCCEEDED", failure_class=None, action="skip", bitwise=True)
    return after_failure(FailureClass.STORAGE, spec)


def after_shard_damage(spec: JobSpec) -> Expected:
    """A train shard damaged for good: `data.on_corrupt_shard: skip` quarantines it and trains
    on without its documents (so the run must differ from the reference); `fail` fails the run
    as `data`, and since a restart finds the same damage, the policy's retries end it
    FAILED_PERMANENT (control/policy.py: a deterministic class out of retries, or failing the
    same way twice) unless it allows no retry at all (after_failure)."""
    if spec.data.on_corrupt_shard == "skip":
        return Expected(state="SUCCEEDED", failure_class=None, action="quarantine", bitwise=False)
    first = after_failure(FailureClass.DATA, spec)
    if first.state != "SUCCEEDED":
        return first
    return Expected(
        state="FAILED",
        terminal_reason="FAILED_PERMANENT",
        failure_class=FailureClass.DATA,
        action="restart",
        bitwise=False,
    )


Adapt = Callable[[JobSpec, int, Path], JobSpec]
"""The spec a fault's run uses, given the drill's spec, the fault's step and its folder."""


def with_args(*args: str) -> Adapt:
    """The spec with trainer arguments appended to `code.args` (`{step}` is the fault's step)."""

    def adapt(spec: JobSpec, step: int, _folder: Path) -> JobSpec:
        data = spec.model_dump(mode="json")
        data["code"]["args"] = [*data["code"]["args"], *(a.format(step=step) for a in args)]
        return spec_from_mapping(data, f"{spec.name} with {' '.join(args)}")

    return adapt


def on_two_nodes(spec: JobSpec, _step: int, _folder: Path) -> JobSpec:
    """The same world size split over two nodes (two torchrun agents on this host meeting through
    a c10d rendezvous: docs/control.md, "Many nodes without Slurm"), so one can be lost."""
    if spec.resources.nodes >= 2:
        return spec
    data = spec.model_dump(mode="json")
    data["resources"].update(nodes=2, devices_per_node=spec.resources.devices_per_node // 2)
    return spec_from_mapping(data, f"{spec.name} on two nodes")


def unchanged(spec: JobSpec, _step: int, _folder: Path) -> JobSpec:
    return spec


def needs_reference_trainer(name: str) -> Callable[[JobSpec], str | None]:
    def refusal(spec: JobSpec) -> str | None:
        if spec.code.entrypoint == REFERENCE_TRAINER:
            return None
        return (
            f"{name} fires a fault knob of the reference trainer, and code.entrypoint is "
            f"{spec.code.entrypoint!r}: drill a spec of `{REFERENCE_TRAINER}`, or leave "
            f"{name} out of --faults"
        )

    return refusal


def needs_even_split(spec: JobSpec) -> str | None:
    if spec.resources.nodes >= 2 or spec.resources.devices_per_node % 2 == 0:
        return None
    return (
        f"node_lost splits resources.devices_per_node={spec.resources.devices_per_node} over two "
        "nodes: make it even or set resources.nodes >= 2, or leave node_lost out of --faults"
    )


def needs_local_checkpoints(spec: JobSpec) -> str | None:
    location = spec.checkpoint.location
    if location is None or "://" not in location or location.startswith("file://"):
        return None
    return (
        f"corrupt_checkpoint_shard flips bytes in a checkpoint file on this machine, and "
        f"checkpoint.location is {location!r}: drill a spec with local checkpoints, or leave "
        "corrupt_checkpoint_shard out of --faults"
    )


SAVE_FAILED = (EventType.CHECKPOINT_FAILED, EventType.FAILURE_CLASSIFIED)
"""A refused or hung save shows as the save's failure, and under `stop` as the group's."""
SHARD_FOUND = (EventType.DATA_SHARD_QUARANTINED, EventType.FAILURE_CLASSIFIED)
"""A damaged shard shows as its quarantine (skip) or as the run's `data` failure (fail)."""


@dataclass(frozen=True)
class Fault:
    """One fault of the matrix."""

    name: str
    mechanism: str
    """How it is injected, in words (the page and docs/drill.md show it)."""
    injector: Callable[["injectors.Target"], "injectors.Injector"]
    """Makes the injector of one run (drill/injectors.py)."""
    expect: Callable[[JobSpec], Expected]
    """The outcome the spec's policy calls for."""
    adapt: Adapt = unchanged
    """The spec this fault's run uses, given the drill's spec, the fault's step and folder."""
    refusal: Callable[[JobSpec], str | None] = lambda _spec: None
    """Why the fault cannot be injected into a spec (the field and the fix), or None."""
    checkpoints_before: int = 1
    """Committed checkpoints the run has before the fault, so a restore has one to use."""
    at_launch: bool = False
    """Aimed at generation 1's launch rather than a step: the run has all its steps ahead."""
    controller: Literal["in_process", "process"] = "in_process"
    """Where the run's controller runs: in the drill's process, or as `runwright controller`
    processes the injector can kill and start again."""
    detected_by: tuple[EventType, ...] = (EventType.FAILURE_CLASSIFIED,)
    """The events that show the platform noticed the fault, the first after the injection."""


FAULTS: dict[str, Fault] = {
    fault.name: fault
    for fault in (
        Fault(
            name="sigkill_rank",
            mechanism="SIGKILL to rank 1's process, sent from the drill (a process killed by the "
            "kernel's OOM killer or a dying host)",
            injector=injectors.signal_rank(1, "SIGKILL"),
            expect=lambda spec: after_failure(FailureClass.NODE_LOST, spec),
        ),
        Fault(
            name="sigstop_rank",
            mechanism="SIGSTOP to rank 1's process: it stays alive and silent, heartbeat "
            "thread included (a hung host); SIGCONT once the drill is done with it",
            injector=injectors.signal_rank(1, "SIGSTOP"),
            expect=lambda spec: after_failure(FailureClass.HANG, spec),
        ),
        Fault(
            name="collective_block",
            mechanism="the reference trainer's --block-at-step knob (armed in the spec's "
            "code.args, generation 1 only): rank 1 enters an all-reduce on a side group its "
            "peers never join; its process and heartbeat thread stay alive, so only the lack "
            "of progress shows it",
            injector=injectors.knob_at_step("rank 1 blocks in an all-reduce its peers never join"),
            expect=lambda spec: after_failure(FailureClass.NO_PROGRESS, spec),
            adapt=with_args("--block-at-step", "{step}", "--block-rank", "1"),
            refusal=needs_reference_trainer("collective_block"),
        ),
        Fault(
            name="node_lost",
            mechanism="the run on two nodes (two torchrun agents on this host, c10d "
            "rendezvous); SIGKILL to node 0's agent and every rank it runs, found by their "
            "launch tags",
            injector=injectors.kill_node(0),
            expect=lambda spec: after_failure(FailureClass.NODE_LOST, spec),
            adapt=on_two_nodes,
            refusal=needs_even_split,
        ),
        Fault(
            name="controller_killed",
            mechanism="the run driven by a `runwright controller` process; SIGKILL to it "
            "once it has launched the group, and a new one started at once on the same store, "
            "which must adopt the live group",
            injector=injectors.kill_controller(),
            expect=handled_live("adopt"),
            # At the launch, so the group outlives a controller's start-up (seconds on a busy
            # machine) and is adopted while it trains, not after it finished.
            at_launch=True,
            controller="process",
            detected_by=(EventType.WORKER_GROUP_ADOPTED,),
        ),
        Fault(
            name="corrupt_checkpoint_shard",
            mechanism="bytes flipped in the largest shard file of the newest committed "
            "checkpoint (written back with fsync), then SIGKILL to rank 1: the restore must "
            "refuse that checkpoint and fall back to the one before",
            injector=injectors.corrupt_newest_checkpoint(1),
            expect=lambda spec: after_failure(FailureClass.NODE_LOST, spec).model_copy(
                update={"fallback": True}
            ),
            refusal=needs_local_checkpoints,
            checkpoints_before=2,
        ),
        Fault(
            name="stale_worker",
            mechanism="a worker process of an older generation started beside the live group "
            "(as one SIGCONTed after its generation was replaced): it saves a checkpoint and "
            "reports a step, both under its old generation",
            injector=injectors.stale_worker(),
            expect=handled_live("reject"),
            detected_by=(EventType.STALE_WRITE_REJECTED,),
        ),
        Fault(
            name="nan_at_step",
            mechanism="the reference trainer's --nan-at-step knob (armed in the spec's "
            "code.args, generation 1 only): rank 0's loss is NaN at that step; "
            "recovery.on_nan decides",
            injector=injectors.knob_at_step("rank 0's loss is NaN"),
            expect=lambda spec: after_failure(FailureClass.NAN_INF, spec),
            adapt=with_args("--nan-at-step", "{step}", "--nan-rank", "0"),
            refusal=needs_reference_trainer("nan_at_step"),
        ),
        Fault(
            name="sigterm_preemption",
            mechanism="SIGTERM to every rank, as a scheduler preempting the job does: the "
            "ranks stop at a step boundary with a save",
            injector=injectors.signal_all_ranks("SIGTERM"),
            expect=lambda spec: after_failure(FailureClass.PREEMPTION, spec, action="requeue"),
        ),
        Fault(
            name="storage_timeout",
            mechanism="checkpoints through the fault-injecting file system; at the fault's "
            "step a write of generation 1's next save is made to block for 60 s, past "
            "checkpoint.save_timeout_seconds (3 s in this run): a timeout stops the run "
            "whatever on_save_failure says",
            injector=storage.arm_at_step("timeout", "a hung write"),
            expect=lambda spec: after_failure(FailureClass.STORAGE, spec),
            adapt=storage.on_faulty_storage(save_timeout_seconds=3.0),
            detected_by=SAVE_FAILED,
        ),
        Fault(
            name="storage_full",
            mechanism="checkpoints through the fault-injecting file system; at the fault's "
            "step a write of generation 1's next save fails with ENOSPC (a full volume), once: "
            "checkpoint.on_save_failure decides",
            injector=storage.arm_at_step("full", "a full volume"),
            expect=after_save_failure,
            adapt=storage.on_faulty_storage(),
            detected_by=SAVE_FAILED,
        ),
        Fault(
            name="storage_read_only",
            mechanism="checkpoints through the fault-injecting file system; at the fault's "
            "step generation 1's next save meets EROFS (a volume remounted read-only), once: "
            "checkpoint.on_save_failure decides",
            injector=storage.arm_at_step("read_only", "a read-only volume"),
            expect=after_save_failure,
            adapt=storage.on_faulty_storage(),
            detected_by=SAVE_FAILED,
        ),
        Fault(
            name="data_shard_corrupt",
            mechanism="the run reads a copy of its dataset; at the fault's step the first "
            "bytes of the heaviest source's largest train shard are overwritten in place "
            "(fsync): data.on_corrupt_shard decides",
            injector=shard_damage.damage_at_step("overwrite"),
            expect=after_shard_damage,
            adapt=shard_damage.on_copied_dataset,
            refusal=shard_damage.needs_dataset("data_shard_corrupt"),
            detected_by=SHARD_FOUND,
        ),
        Fault(
            name="data_shard_removed",
            mechanism="the run reads a copy of its dataset; at the fault's step the heaviest "
            "source's largest train shard is deleted (.bin and .idx): data.on_corrupt_shard "
            "decides",
            injector=shard_damage.damage_at_step("remove"),
            expect=after_shard_damage,
            adapt=shard_damage.on_copied_dataset,
            refusal=shard_damage.needs_dataset("data_shard_removed"),
            detected_by=SHARD_FOUND,
        ),
    )
}
"""Every fault a drill can inject, in the order a drill runs them."""
