"""Checkpoint storage faults of the drill: a save refused or hung by the fault-injecting file
system (ckpt/faultfs.py).

The fault's run keeps its checkpoints under `faulty+file://<the fault's folder>/faulty-checkpoints`,
its ranks told the control file through `environment.env` (RUNWRIGHT_FAULTFS_CONTROL). Nothing
is armed at the launch, so the checkpoints the fault needs commit as usual; at the fault's step
the drill arms one fault, limited to generation 1's saves and to a few operations (`times`), so
the run can recover: a restart's saves (generation 2 on) and the saves after the failed one
never meet it.
"""

from collections.abc import Callable
from pathlib import Path

from runwright.ckpt import faultfs
from runwright.drill.injectors import Injection, Injector, Target
from runwright.spec import JobSpec, spec_from_mapping
from runwright.store import EventRecord

CONTROL_FILE = "faultfs.json"
"""The control file, in the fault's folder."""
GENERATION_1_SAVES = "*/??????????-g000001-*"
"""Every file of a generation-1 checkpoint (`<step:010>-g<generation:06>-<id>/`)."""
HUNG_SAVE_SECONDS = 60.0
"""How long a hung write blocks: far past any `save_timeout_seconds` a drill sets, so only
the timeout ends the save."""


def control_file(folder: Path) -> Path:
    return folder.resolve() / CONTROL_FILE


def on_faulty_storage(
    save_timeout_seconds: float | None = None,
) -> Callable[[JobSpec, int, Path], JobSpec]:
    """The spec with its checkpoints through the fault-injecting file system in the fault's
    folder (and a short `checkpoint.save_timeout_seconds`, for a hung save)."""

    def adapt(spec: JobSpec, _step: int, folder: Path) -> JobSpec:
        data = spec.model_dump(mode="json")
        # The fault folder is the drill's, not a run folder: its own name for the wrapped root.
        checkpoints = folder.resolve() / "faulty-checkpoints"
        data["checkpoint"]["location"] = f"{faultfs.PREFIX}file://{checkpoints}"
        if save_timeout_seconds is not None:
            data["checkpoint"]["save_timeout_seconds"] = save_timeout_seconds
        env = data["environment"]["env"]
        env[faultfs.CONTROL_ENV] = str(control_file(folder))
        return spec_from_mapping(data, f"{spec.name} on faulty storage")

    return adapt


def arm_at_step(kind: faultfs.FaultKind, words: str) -> Callable[[Target], Injector]:
    """At the fault's step: arm `kind` for the next save of generation 1, once (a timeout blocks
    its write for HUNG_SAVE_SECONDS)."""

    def act(target: Target, event: EventRecord) -> Injection:
        control = control_file(target.folder)
        seconds = HUNG_SAVE_SECONDS if kind == "timeout" else 0.0
        fault = faultfs.Fault(kind=kind, seconds=seconds, path=GENERATION_1_SAVES, times=1)
        target.folder.mkdir(parents=True, exist_ok=True)
        faultfs.arm(control, fault)
        return Injection(
            step=event.step,
            detail=f"{words}: {kind} armed in {control} for the next save of generation 1, "
            "one operation",
        )

    def start(target: Target) -> Injector:
        def disarm() -> str | None:
            control = control_file(target.folder)
            if not control.exists():
                return None
            left = faultfs.armed(control).faults
            faultfs.disarm(control)
            return f"disarmed {len(left)} fault(s) the run never met" if left else None

        return Injector(target, act, cleanup=disarm)

    return start
