"""The gates of one rung, as pure functions of what its runs measured (runner.py measures).

A rung passes when, in this order:
1. `ran`: its run trained every step and SUCCEEDED, and committed a checkpoint at its last step
   (the checkpoint the next rung restores);
2. `loss` (not on the first rung): its ledger is coverage-equivalent to the previous rung's (the
   same global sample ids at every step: govern/compare.py) and at every step its loss is within
   `loss_tolerance` of the previous rung's, relative: |l_k - l_{k-1}| <= tol x |l_{k-1}|. Only
   the reduction order differs between world sizes, so the curves agree to rounding;
3. `efficiency` (not on the first rung): E(N) = (throughput(N) / N) / (throughput(1) / 1) of
   this rung's run against the first rung's (plan/scaling.py, seed 000 8.6) is at least
   `min_efficiency`;
4. `reshard` (not on the first rung): a run at this rung's shape restored the previous rung's
   last checkpoint (`checkpoint.resume_from`), resharded when the world size or layout differ,
   and trained on past it to SUCCEEDED.
The ladder stops at the first gate that fails, and says why.
"""

from pydantic import Field

from runwright.ladder.rungs import Rung
from runwright.records import Record


class LadderSettings(Record):
    """The ladder's tolerances (command-line options of `runwright ladder`)."""

    loss_tolerance: float = Field(default=0.02, gt=0)
    """Largest relative loss difference from the previous rung at any step (0.02: 2 %)."""
    min_efficiency: float = Field(default=0.5, gt=0)
    """Smallest E(N) a rung may have against the one-rank rung."""
    carry_steps: int = Field(default=1, ge=1)
    """Steps the reshard run trains past the checkpoint it restored."""
    run_limit_seconds: float = Field(default=1800.0, gt=0)
    """A run still going after this long is cancelled (a hang ends the ladder, not the host)."""


class RungMeasure(Record):
    """What a rung's runs showed (runner.py fills it from the store)."""

    rung: Rung
    run_id: str
    state: str
    terminal_reason: str | None = None
    steps: int
    """training.steps: the rung's run should reach it."""
    last_step: int | None = None
    committed_step: int | None = None
    """The newest committed checkpoint's step."""
    tokens_per_second: float | None = None
    """Loss tokens per productive second (govern/throughput.py)."""
    measure_error: str | None = None
    """Why the throughput could not be measured."""
    losses: dict[int, float] = Field(default_factory=dict)
    """Rank 0's reported loss by step."""
    equivalence: str | None = None
    """compare_runs against the previous rung's run; None on the first rung."""
    first_difference: str | None = None
    carry_run_id: str | None = None
    carry_state: str | None = None
    restored_step: int | None = None
    restore_mode: str | None = None
    """`exact` or `reshard`, from the carry run's RESTORED event."""
    carry_last_step: int | None = None


class Gate(Record):
    name: str
    passed: bool
    evidence: str


class RungResult(Record):
    rung: Rung
    measure: RungMeasure
    efficiency: float | None
    """E(N) against the first rung (1.0 there)."""
    max_loss_difference: float | None
    """Largest relative loss difference from the previous rung."""
    gates: list[Gate]
    passed: bool


def ran_gate(m: RungMeasure) -> Gate:
    ok = m.state == "SUCCEEDED" and m.last_step == m.steps and m.committed_step == m.steps
    why = f"run {m.run_id} {m.state}" + (f" ({m.terminal_reason})" if m.terminal_reason else "")
    why += f", last step {m.last_step} of {m.steps}, newest checkpoint at step {m.committed_step}"
    return Gate(name="ran", passed=ok, evidence=why)


def loss_difference(previous: dict[int, float], current: dict[int, float]) -> tuple[float, int]:
    """(largest relative difference, its step) over the steps both report."""
    worst, at = 0.0, 0
    for step in sorted(set(previous) & set(current)):
        base = abs(previous[step]) or 1.0
        diff = abs(current[step] - previous[step]) / base
        if diff > worst:
            worst, at = diff, step
    return worst, at


def loss_gate(prev: RungMeasure, m: RungMeasure, tolerance: float) -> tuple[Gate, float | None]:
    if m.equivalence not in ("bitwise-equal", "coverage-equivalent"):
        why = f"the ledger against rung {prev.rung.index}'s run {prev.run_id} is {m.equivalence}"
        if m.first_difference:
            why += f" (first difference: {m.first_difference})"
        return Gate(name="loss", passed=False, evidence=why), None
    shared = sorted(set(prev.losses) & set(m.losses))
    if len(shared) < m.steps:
        why = f"losses reported for {len(shared)} of {m.steps} steps on both rungs"
        return Gate(name="loss", passed=False, evidence=why), None
    worst, at = loss_difference(prev.losses, m.losses)
    why = (
        f"{m.equivalence} ledger; largest relative loss difference {worst:.2e} at step {at} "
        f"(limit {tolerance:g})"
    )
    return Gate(name="loss", passed=worst <= tolerance, evidence=why), worst


def efficiency(first: RungMeasure, m: RungMeasure) -> float | None:
    """E(N) = (throughput(N) / N) / (throughput(N0) / N0), N0 the first rung's world size."""
    if not first.tokens_per_second or not m.tokens_per_second:
        return None
    base = first.tokens_per_second / first.rung.world_size
    return (m.tokens_per_second / m.rung.world_size) / base


def efficiency_gate(
    first: RungMeasure, m: RungMeasure, minimum: float
) -> tuple[Gate, float | None]:
    value = efficiency(first, m)
    if value is None:
        why = f"no throughput to compare: {m.measure_error or first.measure_error}"
        return Gate(name="efficiency", passed=False, evidence=why), None
    why = (
        f"E({m.rung.world_size}) = ({m.tokens_per_second:.0f} / {m.rung.world_size}) / "
        f"({first.tokens_per_second:.0f} / {first.rung.world_size}) tokens/s = {value:.3f} "
        f"(minimum {minimum:g})"
    )
    return Gate(name="efficiency", passed=value >= minimum, evidence=why), value


def reshard_gate(prev: RungMeasure, m: RungMeasure) -> Gate:
    changed = (prev.rung.world_size, prev.rung.devices_per_node) != (
        m.rung.world_size,
        m.rung.devices_per_node,
    )
    expected_mode = "reshard" if prev.rung.world_size != m.rung.world_size else None
    ok = (
        m.carry_state == "SUCCEEDED"
        and m.restored_step == prev.committed_step
        and m.carry_last_step is not None
        and m.carry_last_step > (m.restored_step or 0)
        and (expected_mode is None or m.restore_mode == expected_mode)
    )
    why = (
        f"run {m.carry_run_id} at world size {m.rung.world_size} restored step "
        f"{m.restored_step} of rung {prev.rung.index}'s run {prev.run_id} (world size "
        f"{prev.rung.world_size}, mode {m.restore_mode}), trained to step {m.carry_last_step} "
        f"and ended {m.carry_state}"
    )
    if not changed:
        why += "; the shapes have the same world size, so an exact restore is expected"
    return Gate(name="reshard", passed=ok, evidence=why)


def judge(first: RungMeasure | None, prev: RungMeasure | None, m: RungMeasure,
          settings: LadderSettings, *, reshard: bool = True) -> RungResult:  # fmt: skip
    """The rung's gates in order, up to the first that fails; without `reshard` the last gate
    is left out (the runner judges the rung's own run before it starts the carry run)."""
    gates = [ran_gate(m)]
    worst: float | None = None
    value: float | None = 1.0 if prev is None else None
    if prev is not None and first is not None:
        checks = (
            lambda: loss_gate(prev, m, settings.loss_tolerance),
            lambda: efficiency_gate(first, m, settings.min_efficiency),
            lambda: (reshard_gate(prev, m), None),
        )[: 3 if reshard else 2]
        for index, check in enumerate(checks):
            if not gates[-1].passed:
                break
            gate, figure = check()
            gates.append(gate)
            if index == 0:
                worst = figure
            elif index == 1:
                value = figure
    return RungResult(
        rung=m.rung,
        measure=m,
        efficiency=value,
        max_loss_difference=worst,
        gates=gates,
        passed=all(g.passed for g in gates),
    )
