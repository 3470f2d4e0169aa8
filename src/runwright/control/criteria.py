"""Stop criteria the controller evaluates as a run trains (issue 17; spec
`governance.stop_criteria`): a pure function of the run's training-loss history and its budget
usage, so it can be tested on any history.

The loss history is rank 0's STEP_HEALTHY `loss` by step, as ingested (a step replayed after a
restore replaces the first execution's value). Each criterion averages the loss over windows of
steps, so one noisy step never stops a run:

  loss_above      the mean of the last `window_steps` steps is above `loss`, once the run has
                  trained `after_tokens` tokens
  no_improvement  the history cut into consecutive windows of `window_steps` (the newest ending
                  at the newest step): none of the last `windows` window means is `min_delta`
                  below the best window mean before them
  budget_share    `share` of the budget limit `of` is spent and the mean of the last
                  `window_steps` steps is not below `unless_loss_below`

A criterion with too few steps to average is not met yet. Words (a criterion given as text) are
for a person and never evaluated.
"""

from collections.abc import Mapping, Sequence

from runwright.control.budget import BudgetUsage
from runwright.control.contamination import ContaminatedRange, without_contaminated
from runwright.records import Record
from runwright.spec import JobSpec
from runwright.spec.policies import BudgetShare, LossAbove, NoImprovement, StopCriterion

CRITERIA_SECONDS = 5.0
"""How often a controller evaluates a run's criteria when no new step arrived (a budget share
grows with wall time and device-hours too)."""
MAX_HISTORY_STEPS = 100_000
"""Steps of loss history a controller keeps per run: the longest window any criterion needs is
far below it, and a week-long run's history stays bounded."""


class CriterionMet(Record):
    """A met criterion: which one (its index and kind) and the figures that met it."""

    index: int
    kind: str
    evidence: str


def evaluable(spec: JobSpec) -> list[tuple[int, StopCriterion]]:
    """The spec's criteria the controller evaluates, with their index in the list."""
    return [(i, c) for i, c in enumerate(spec.governance.stop_criteria) if not isinstance(c, str)]


def first_met(
    spec: JobSpec,
    losses: Mapping[int, float],
    usage: BudgetUsage,
    eval_losses: Mapping[int, float] | None = None,
    contaminated: Sequence[ContaminatedRange] = (),
) -> CriterionMet | None:
    """The first of the spec's criteria that `losses` (step -> training loss), `eval_losses`
    (step -> eval-split loss) and `usage` meet; steps in a `contaminated` range are left out
    (control/contamination.py)."""
    losses = without_contaminated(losses, contaminated)
    eval_losses = without_contaminated(eval_losses or {}, contaminated)
    for index, criterion in evaluable(spec):
        on_eval = getattr(criterion, "metric", "loss") == "eval_loss"
        history = (eval_losses or {}) if on_eval else losses
        steps = sorted(history)
        if on_eval:  # each evaluation is one window
            criterion = criterion.model_copy(update={"window_steps": 1})
        words = _met(criterion, spec, [history[s] for s in steps], steps, usage)
        if words is not None:
            return CriterionMet(index=index, kind=criterion.kind, evidence=words)
    return None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _met(
    criterion: StopCriterion,
    spec: JobSpec,
    values: list[float],
    steps: list[int],
    usage: BudgetUsage,
) -> str | None:
    if isinstance(criterion, LossAbove):
        window = criterion.window_steps
        if len(values) < window or usage.tokens < criterion.after_tokens:
            return None
        mean = _mean(values[-window:])
        if mean <= criterion.loss:
            return None
        return (
            f"the loss averaged {mean:.4g} over steps {steps[-window]}-{steps[-1]}, above "
            f"{criterion.loss:g}, after {usage.tokens:,} tokens (criterion: after "
            f"{criterion.after_tokens:,})"
        )
    if isinstance(criterion, NoImprovement):
        width, recent = criterion.window_steps, criterion.windows
        count = len(values) // width
        if count < recent + 1:
            return None
        tail = values[len(values) - count * width :]
        means = [_mean(tail[i * width : (i + 1) * width]) for i in range(count)]
        best_before = min(means[:-recent])
        best_recent = min(means[-recent:])
        if best_recent < best_before - criterion.min_delta:
            return None
        what = "evaluations" if criterion.metric == "eval_loss" else f"windows of {width} steps"
        return (
            f"the {criterion.metric} of the last {recent} {what} was at best {best_recent:.4g}, "
            f"not {criterion.min_delta:g} below the earlier best {best_before:.4g} "
            f"(up to step {steps[-1]})"
        )
    assert isinstance(criterion, BudgetShare)
    limit = getattr(spec.budget, criterion.of)
    used = float(getattr(usage, criterion.of))
    window = criterion.window_steps
    if limit is None or used < criterion.share * limit or len(values) < window:
        return None
    mean = _mean(values[-window:])
    if mean < criterion.unless_loss_below:
        return None
    return (
        f"{used:,.4g} of budget.{criterion.of}={limit:,.4g} spent ({100 * used / limit:.0f} %, "
        f"criterion {100 * criterion.share:.0f} %) and the loss averaged {mean:.4g} over the "
        f"last {window} steps, not below {criterion.unless_loss_below:g}"
    )
