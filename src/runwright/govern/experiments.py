"""Experiments (issue 25; seeds 000 and 004): runs grouped under an owner and a hypothesis, and
whether they can be compared, computed rather than assumed.

Two runs are comparable when they read the same data version with the same tokenizer, are
evaluated on the same eval split, and both trained every step they planned. Each run is judged
against the experiment's reference (its first run, or the one named): a difference in any of
those is a reason, in words, why it is not comparable. Contaminated steps
(control/contamination.py) are left out of the figures compared: each run's mean loss over the
steps both it and the reference trained, and its last loss outside a marked range.

An experiment is a store record (store/experiments.py), created and added to through the access
layer (access/experiments.py: the CLI on the store, the server, both audited); this module
computes its view from the runs' evidence. An experiment an earlier version kept as
`<root>/experiments/<name>.json` is read once into the store when first asked for
(`legacy_experiment`), the file left where it was.
"""

import json
import re
from pathlib import Path
from typing import Any

from pydantic import Field

from runwright.control.contamination import ContaminatedRange, contaminated_ranges
from runwright.errors import RunwrightError
from runwright.govern.evidence import dataset_identity
from runwright.layout import experiments_dir
from runwright.observe.timeline import build_timeline
from runwright.records import Record
from runwright.store import RunRecord, Store
from runwright.store.experiments import Experiment

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise RunwrightError(
            f"experiment name {name!r}: letters, digits, '.', '_', '-', starting with a letter "
            "or digit"
        )
    return name


def legacy_experiment(root: Path, name: str) -> dict[str, Any] | None:
    """The fields of `<root>/experiments/<name>.json` (an earlier version's record), or None."""
    path = experiments_dir(root) / f"{check_name(name)}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not {"owner", "hypothesis"} <= set(data):
        return None
    return data


class Identity(Record):
    """What decides whether a run can be compared with another."""

    data_version: str | None
    """The dataset id (content address) the run read."""
    tokenizer: str | None
    """The tokenizer's hash."""
    eval_split: str | None
    """`<dataset id>:eval:<sequences>` when the run evaluates, else None."""
    planned_steps: int | None
    trained_steps: int
    state: str


class RunComparability(Record):
    """One run of an experiment, against the reference."""

    run_id: str
    identity: Identity
    comparable: bool
    reasons: list[str] = Field(default_factory=list)
    """Why it is not comparable, each in words."""
    contaminated: list[ContaminatedRange] = Field(default_factory=list)
    mean_loss: float | None
    """Mean loss over the steps this run and the reference both trained, marked steps left out."""
    last_loss: float | None
    """Loss of the newest step outside a marked range."""
    steps_compared: int


class ExperimentView(Record):
    """`runwright experiment show`."""

    experiment: Experiment
    reference: str | None
    runs: list[RunComparability]


def _identity(store: Store, run: RunRecord, events: list, trained: int) -> Identity:
    spec: dict[str, Any] = run.spec
    data = dataset_identity(store, spec, events)
    training = spec.get("training") or {}
    tokenizer = (spec.get("tokenizer") or {}).get("hash") or data.tokenizer_hash
    evaluates = training.get("eval_every_steps") is not None
    planned = (run.plan or {}).get("total_steps", {}).get("value")
    return Identity(
        data_version=data.dataset_id,
        tokenizer=tokenizer,
        eval_split=f"{data.dataset_id}:eval:{training.get('eval_sequences')}"
        if evaluates
        else None,
        planned_steps=int(planned) if isinstance(planned, int | float) else None,
        trained_steps=trained,
        state=run.state,
    )


def _reasons(me: Identity, reference: Identity) -> list[str]:
    reasons = []
    if me.state != "SUCCEEDED" or (me.planned_steps and me.trained_steps < me.planned_steps):
        reasons.append(
            f"partial run: {me.state}, {me.trained_steps} of {me.planned_steps} steps trained"
        )
    for field, words in (
        ("data_version", "data version"),
        ("tokenizer", "tokenizer"),
        ("eval_split", "eval split"),
    ):
        mine, theirs = getattr(me, field), getattr(reference, field)
        if mine != theirs:
            reasons.append(
                f"{words} differs: {_short(mine)} here, {_short(theirs)} in the reference"
            )
    return reasons


def _short(value: str | None) -> str:
    if value is None:
        return "none"
    return value[:12] if re.fullmatch(r"[0-9a-f]{64}", value) else value


def show_experiment(
    store: Store, experiment: Experiment, reference: str | None = None
) -> ExperimentView:
    """The experiment's runs against `reference` (a run id in it; default its first run)."""
    if reference is not None and reference not in experiment.runs:
        raise RunwrightError(
            f"run {reference} is not in experiment {experiment.name}: add it first"
        )
    ref_id = reference or (experiment.runs[0] if experiment.runs else None)
    losses: dict[str, dict[int, float]] = {}
    identities: dict[str, Identity] = {}
    marks: dict[str, list[ContaminatedRange]] = {}
    for run_id in experiment.runs:
        run = store.get_run(run_id)
        events = store.events(run_id)
        newest: dict[int, tuple[int, float]] = {}
        for p in build_timeline(events).steps:
            if p.loss is not None and p.generation >= newest.get(p.step, (-1, 0.0))[0]:
                newest[p.step] = (p.generation, p.loss)
        marks[run_id] = contaminated_ranges(events)
        losses[run_id] = {
            s: loss for s, (_, loss) in newest.items() if not any(r.holds(s) for r in marks[run_id])
        }
        identities[run_id] = _identity(store, run, events, len(newest))
    rows = []
    for run_id in experiment.runs:
        me = identities[run_id]
        reasons = _reasons(me, identities[ref_id]) if ref_id else []
        common = sorted(set(losses[run_id]) & set(losses[ref_id])) if ref_id else []
        mine = losses[run_id]
        rows.append(
            RunComparability(
                run_id=run_id,
                identity=me,
                comparable=not reasons,
                reasons=reasons,
                contaminated=marks[run_id],
                mean_loss=sum(mine[s] for s in common) / len(common) if common else None,
                last_loss=mine[max(mine)] if mine else None,
                steps_compared=len(common),
            )
        )
    return ExperimentView(experiment=experiment, reference=ref_id, runs=rows)
