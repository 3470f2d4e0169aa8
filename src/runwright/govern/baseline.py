"""Regression baselines (issue 27; seed 000, 8.7: keep a fixed workload's baseline before a
driver, CUDA, NCCL, kernel or image upgrade, re-run the same spec after it, compare within
tolerance, and never mistake a numerical change for a speed gain).

`runwright baseline record SPEC --name NAME` runs the spec through the controller and the local
executor with one drill fault (a SIGKILLed rank by default, so the baseline holds a recovery),
measures it (govern/baseline_figures.py) and keeps it with its tolerances in
`<root>/baselines/NAME/baseline.json`. `runwright baseline check NAME` runs the same spec again
(with `--set` changes: another pool, a declared slower data path) and judges every figure:

  speed and time figures   relative change in the worse direction within the figure's tolerance;
                           a change smaller than `floor_seconds` passes (timer noise of a
                           millisecond phase is not a regression)
  memory                   relative growth within `peak_memory`
  anomalies                no more of any kind than the baseline had
  loss curve               bitwise equal under `reproducibility.level: bitwise`, else every step
                           within `loss_relative` of the baseline's loss

A figure better than its tolerance while the loss curve changed is `flagged`: the gain may come
from computing something else (a kernel, a precision, a reduction order).
"""

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from rich.console import Console

from runwright.control.supervise import write_atomically
from runwright.drill.faults import FAULTS
from runwright.govern.baseline_figures import EnvironmentLabels, WorkloadFigures
from runwright.govern.baseline_run import BaselineError, run_workload
from runwright.layout import baseline_dir
from runwright.records import Record
from runwright.spec import JobSpec, spec_from_mapping
from runwright.spec.overrides import apply_overrides
from runwright.store import Store


class Tolerances(Record):
    """How far each figure may move in its worse direction before the check fails (relative:
    0.3 = 30 %)."""

    loss_tokens_per_second: float = Field(default=0.3, ge=0)
    """Drop in loss tokens per second."""
    step_seconds_p50: float = Field(default=0.5, ge=0)
    """Growth of the median step time."""
    step_seconds_p90: float = Field(default=1.0, ge=0)
    """Growth of the 90th percentile step time."""
    data_wait_seconds_mean: float = Field(default=1.0, ge=0)
    """Growth of the mean data wait per rank-step."""
    comm_seconds_mean: float = Field(default=1.0, ge=0)
    """Growth of the mean gradient-collective time per rank-step."""
    peak_memory: float = Field(default=0.25, ge=0)
    """Growth of the largest rank's peak memory."""
    checkpoint_save_seconds: float = Field(default=1.0, ge=0)
    """Growth of the mean checkpoint persist time."""
    restore_seconds: float = Field(default=1.0, ge=0)
    """Growth of the mean restore time."""
    recovery_seconds: float = Field(default=1.0, ge=0)
    """Growth of the fault's recovery time."""
    loss_relative: float = Field(default=0.02, ge=0)
    """Largest relative difference of a step's loss when the run is not bitwise reproducible."""
    floor_seconds: float = Field(default=0.05, ge=0)
    """A time figure that moved by less than this many seconds passes whatever its ratio."""


Verdict = Literal["pass", "fail", "flagged", "missing"]


class FigureVerdict(Record):
    """One figure's judgement."""

    figure: str
    baseline: float | None
    now: float | None
    change: float | None
    """(now - baseline) / baseline; None when either is missing or the baseline is 0."""
    tolerance: str
    """The bound applied, in words."""
    verdict: Verdict
    reason: str


class Baseline(Record):
    """baseline.json."""

    name: str
    recorded_unix_s: float
    spec: dict[str, Any]
    """The workload's spec, as recorded; every check runs it again."""
    spec_hash: str
    workdir: str
    """The folder the workload's runs start in (relative paths in the spec are read from it)."""
    fault: str | None
    """The drill fault every run of the workload recovers from."""
    tolerances: Tolerances
    figures: WorkloadFigures


class BaselineCheck(Record):
    """check-<time>.json: one re-run and its verdicts."""

    name: str
    checked_unix_s: float
    spec_hash: str
    spec_changes: list[str]
    """The `--set` changes the check ran with."""
    baseline_labels: EnvironmentLabels
    labels: EnvironmentLabels
    figures: WorkloadFigures
    verdicts: list[FigureVerdict]
    ok: bool
    """No figure failed (flagged or missing figures do not fail the check)."""
    numerics_changed: bool
    json_path: str = ""


# (figure, tolerance field, getter, higher is better)
_SPEED = (
    ("loss_tokens_per_second", "loss_tokens_per_second", True),
    ("step_seconds_p50", "step_seconds_p50", False),
    ("step_seconds_p90", "step_seconds_p90", False),
    ("data_wait_seconds_mean", "data_wait_seconds_mean", False),
    ("comm_seconds_mean", "comm_seconds_mean", False),
)
_TIMES = (
    ("checkpoint_save_seconds", "checkpoint_save_seconds"),
    ("restore_seconds", "restore_seconds"),
    ("recovery_seconds", "recovery_seconds"),
)


def _relative(
    figure: str,
    before: float | None,
    now: float | None,
    tolerance: float,
    higher_is_better: bool,
    floor: float,
    numerics_changed: bool,
) -> FigureVerdict:
    worse = "drop" if higher_is_better else "growth"
    bound = f"{worse} <= {100 * tolerance:g} %" + (f" or < {floor:g} s" if floor else "")
    if before is None or now is None:
        missing = "the baseline" if before is None else "this run"
        return FigureVerdict(
            figure=figure, baseline=before, now=now, change=None, tolerance=bound,
            verdict="missing", reason=f"{missing} has no {figure}",
        )  # fmt: skip
    change = (now - before) / before if before else None
    bad = (before - now) if higher_is_better else (now - before)
    allowed = tolerance * abs(before)
    if bad > allowed and abs(now - before) >= floor:
        verdict: Verdict = "fail"
        reason = f"{figure} {worse} of {abs(bad):.4g} beyond the {100 * tolerance:g} % allowed"
    elif -bad > allowed and abs(now - before) >= floor and numerics_changed:
        verdict = "flagged"
        reason = "faster, but the loss curve changed: the gain may be a numerical change"
    else:
        verdict, reason = "pass", "within tolerance"
    return FigureVerdict(
        figure=figure, baseline=before, now=now, change=change, tolerance=bound,
        verdict=verdict, reason=reason,
    )  # fmt: skip


def loss_verdict(
    before: Sequence[tuple[int, float]],
    now: Sequence[tuple[int, float]],
    bitwise: bool,
    loss_relative: float,
) -> FigureVerdict:
    """The loss curve: bitwise equal at every step, or within `loss_relative`."""
    a, b = dict(before), dict(now)
    bound = "bitwise equal" if bitwise else f"within {100 * loss_relative:g} % at every step"
    if set(a) != set(b):
        only = sorted(set(a) ^ set(b))
        return FigureVerdict(
            figure="loss_curve", baseline=None, now=None, change=None, tolerance=bound,
            verdict="fail", reason=f"the runs reported different steps (first: step {only[0]})",
        )  # fmt: skip
    worst_step, worst = None, 0.0
    for step in sorted(a):
        if a[step] == b[step]:
            continue
        relative = abs(b[step] - a[step]) / abs(a[step]) if a[step] else float("inf")
        if worst_step is None or relative > worst:
            worst_step, worst = step, relative
        if bitwise:
            return FigureVerdict(
                figure="loss_curve", baseline=a[step], now=b[step], change=relative,
                tolerance=bound, verdict="fail",
                reason=f"first differs at step {step}: {a[step]!r} then, {b[step]!r} now",
            )  # fmt: skip
    if worst_step is not None and worst > loss_relative:
        return FigureVerdict(
            figure="loss_curve", baseline=a[worst_step], now=b[worst_step], change=worst,
            tolerance=bound, verdict="fail",
            reason=f"step {worst_step} differs by {100 * worst:.3g} %",
        )  # fmt: skip
    words = "identical at every step" if worst_step is None else f"at most {100 * worst:.3g} %"
    return FigureVerdict(
        figure="loss_curve", baseline=None, now=None, change=worst if worst_step else 0.0,
        tolerance=bound, verdict="pass", reason=f"{len(a)} steps {words}",
    )  # fmt: skip


def judge(
    baseline: WorkloadFigures, now: WorkloadFigures, tolerances: Tolerances, bitwise: bool
) -> list[FigureVerdict]:
    """Every figure's verdict, the loss curve first (the others' flags depend on it)."""
    loss = loss_verdict(baseline.loss_curve, now.loss_curve, bitwise, tolerances.loss_relative)
    changed = loss.verdict == "fail" or bool(loss.change)
    verdicts = [loss]
    floor = tolerances.floor_seconds
    for figure, field, higher in _SPEED:
        verdicts.append(
            _relative(
                figure,
                getattr(baseline.performance, figure),
                getattr(now.performance, figure),
                getattr(tolerances, field),
                higher,
                0.0 if higher else floor,
                changed,
            )
        )
    verdicts.append(
        _relative(
            "peak_host_bytes",
            baseline.peak_host_bytes,
            now.peak_host_bytes,
            tolerances.peak_memory,
            False,
            0.0,
            changed,
        )
    )
    if baseline.peak_device_bytes is not None or now.peak_device_bytes is not None:
        verdicts.append(
            _relative(
                "peak_device_bytes",
                baseline.peak_device_bytes,
                now.peak_device_bytes,
                tolerances.peak_memory,
                False,
                0.0,
                changed,
            )
        )
    for figure, field in _TIMES:
        verdicts.append(
            _relative(
                figure,
                getattr(baseline, figure),
                getattr(now, figure),
                getattr(tolerances, field),
                False,
                floor,
                changed,
            )
        )
    for kind, count in sorted(now.anomalies.items()):
        before = baseline.anomalies.get(kind, 0)
        verdicts.append(
            FigureVerdict(
                figure=f"anomalies.{kind}",
                baseline=before,
                now=count,
                change=None,
                tolerance="no more than the baseline",
                verdict="fail" if count > before else "pass",
                reason=f"{count} now, {before} then",
            )
        )
    return verdicts


def baseline_file(root: Path, name: str) -> Path:
    return baseline_dir(root, name) / "baseline.json"


def record_baseline(
    root: Path,
    store: Store,
    spec: JobSpec,
    name: str,
    *,
    workdir: Path,
    tolerances: Tolerances,
    fault: str | None = "sigkill_rank",
    image_digest: str | None = None,
    replace: bool = False,
    console: Console,
) -> Baseline:
    path = baseline_file(root, name)
    if path.exists() and not replace:
        raise BaselineError(
            f"baseline {name} exists ({path}); check against it with `runwright baseline check "
            f"{name}`, or record again with --replace"
        )
    if fault is not None and fault not in FAULTS:
        raise BaselineError(f"unknown fault {fault}: --fault takes one of {', '.join(FAULTS)}")
    folder = baseline_dir(root, name) / "record"
    figures = run_workload(root, store, spec, fault, workdir, folder, console, image_digest)
    baseline = Baseline(
        name=name,
        recorded_unix_s=time.time(),
        spec=spec.model_dump(mode="json"),
        spec_hash=spec.spec_hash,
        workdir=str(workdir),
        fault=fault,
        tolerances=tolerances,
        figures=figures,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, baseline.model_dump_json(indent=2) + "\n")
    return baseline


def load_baseline(root: Path, name: str) -> Baseline:
    path = baseline_file(root, name)
    if not path.exists():
        raise BaselineError(
            f"no baseline {name} under {root} ({path} is missing); record one with `runwright "
            f"baseline record SPEC --name {name}`"
        )
    return Baseline.model_validate_json(path.read_text())


def check_baseline(
    root: Path,
    store: Store,
    name: str,
    *,
    overrides: Sequence[str] = (),
    tolerances: Tolerances | None = None,
    image_digest: str | None = None,
    pin: bool = False,
    console: Console,
) -> BaselineCheck:
    baseline = load_baseline(root, name)
    data = baseline.spec
    source = f"baseline {name}'s spec"
    pins = baseline.figures.labels.node_pins() if pin else {}
    if pins:  # the nodes the baseline ran on: same driver, CUDA and NCCL (docs/sched.md)
        resources = {**data.get("resources", {}), "node_labels": pins}
        data = {**data, "resources": resources}
        source += f" pinned to {pins}"
    if overrides:
        data = apply_overrides(data, list(overrides))
        source += f" with --set {' '.join(overrides)}"
    spec = spec_from_mapping(data, source)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = baseline_dir(root, name) / f"check-{stamp}"
    figures = run_workload(
        root, store, spec, baseline.fault, Path(baseline.workdir), folder, console, image_digest
    )
    applied = tolerances or baseline.tolerances
    bitwise = spec.reproducibility.level == "bitwise"
    verdicts = judge(baseline.figures, figures, applied, bitwise)
    loss = verdicts[0]
    check = BaselineCheck(
        name=name,
        checked_unix_s=time.time(),
        spec_hash=spec.spec_hash,
        spec_changes=list(overrides),
        baseline_labels=baseline.figures.labels,
        labels=figures.labels,
        figures=figures,
        verdicts=verdicts,
        ok=not any(v.verdict == "fail" for v in verdicts),
        numerics_changed=loss.verdict == "fail" or bool(loss.change),
        json_path=str(folder / "check.json"),
    )
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(Path(check.json_path), check.model_dump_json(indent=2) + "\n")
    return check
