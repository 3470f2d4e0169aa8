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
from typing import Literal

from runwright.control.failures import DETERMINISTIC
from runwright.drill import injectors
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


def with_args(*args: str) -> Callable[[JobSpec, int], JobSpec]:
    """The spec with trainer arguments appended to `code.args` (`{step}` is the fault's step)."""

    def adapt(spec: JobSpec, step: int) -> JobSpec:
        data = spec.model_dump(mode="json")
        data["code"]["args"] = [*data["code"]["args"], *(a.format(step=step) for a in args)]
        return spec_from_mapping(data, f"{spec.name} with {' '.join(args)}")

    return adapt


def on_two_nodes(spec: JobSpec, _step: int) -> JobSpec:
    """The same world size split over two nodes (two torchrun agents on this host meeting through
    a c10d rendezvous: docs/control.md, "Many nodes without Slurm"), so one can be lost."""
    if spec.resources.nodes >= 2:
        return spec
    data = spec.model_dump(mode="json")
    data["resources"].update(nodes=2, devices_per_node=spec.resources.devices_per_node // 2)
    return spec_from_mapping(data, f"{spec.name} on two nodes")


def unchanged(spec: JobSpec, _step: int) -> JobSpec:
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
    adapt: Callable[[JobSpec, int], JobSpec] = unchanged
    """The spec this fault's run uses, given the drill's spec and the fault's step."""
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
    )
}
"""Every fault a drill can inject, in the order a drill runs them."""
