"""Recovery equivalence (seed 004, "proving recovery equivalence"): is a run that failed and
recovered the same run as one that never failed?

For `bitwise` reproducibility three things must hold between the two runs:
- final parameters are bit-identical (the trainer records a sha256 of every parameter's bytes);
- the consumed-sample ledgers are identical: each optimizer step consumed the same global sample
  range (the surviving lineage of a recovered run: a replayed step's last report wins);
- the loss curves are identical after the restored step (replayed steps reproduce the loss).

When the two runs trained at different world sizes (an elastic run that shrank, against a
fixed-size one: control/membership.py), gradients are reduced in another order and bitwise
equality is not expected. What must then hold is coverage equivalence: the same consumed-sample
ledger and, step by step, the same global batch (the set of global sample ids every rank's report
of the step names); the parameters are compared by distance instead (param_diff.py), and the
result is `coverage-equivalent` with that distance, or `different` if a ledger or batch differs.

Each comes from the library, not the trainer: the digests from the state the run's checkpointer
holds (at the context's close), the sample ranges from `runwright.data.DataLoader`, the losses
from `step_healthy`. A run whose script used only part of the integration lacks some of them: the
comparison then says `incomplete`, names what is missing and what would report it, and compares
the rest (a difference found there is still `different`).
"""

from typing import Any

from runwright.control.contamination import contaminated_ranges
from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.param_diff import ParameterDifference, parameter_difference
from runwright.observe.rank_steps import per_rank
from runwright.records import Record
from runwright.store import EventRecord, Store


class Comparison(Record):
    run_a: str
    run_b: str
    equivalence: str
    """`bitwise-equal`, `coverage-equivalent` (world sizes differ: same ledger and global
    batches, parameters within `parameter_difference`), `different`, or `incomplete` (no
    difference in what both reported, but some evidence is missing: `missing` says what)."""
    first_difference: str | None
    """The first differing key: `parameters:<name>`, `ledger:step <n>` or `loss:step <n>`."""
    parameters_compared: int
    steps_compared: int
    restored_steps: list[int]
    """Steps the runs restored from (the recovered run's checkpoints)."""
    missing: tuple[str, ...] = ()
    """Evidence a run did not report, each with what would report it; `incomplete` if any."""
    world_sizes_a: tuple[int, ...] = ()
    """The world sizes run A's generations ran at, in order."""
    world_sizes_b: tuple[int, ...] = ()
    """Run B's."""
    ledger_identical: bool = True
    """Every step consumed the same global sample range in both runs."""
    global_batches_identical: bool = True
    """Every step's global batch (the sample ids all ranks' reports name) is the same set."""
    parameter_difference: ParameterDifference | None = None
    """Distance of the final checkpoints' model states, when the world sizes differ."""
    note: str = ""
    """What the verdict can and cannot mean, in words."""
    contaminated_steps: tuple[tuple[int, int], ...] = ()
    """Step ranges either run marked contaminated, left out of the loss comparison."""


def _lineage(events: list[EventRecord], rank: int = 0) -> dict[int, dict[str, Any]]:
    """step -> the newest generation's report of it (what the surviving lineage computed)."""
    newest: dict[int, tuple[int, dict[str, Any]]] = {}
    for e in per_rank(events):
        if e.type != EventType.STEP_HEALTHY or e.step is None or e.attributes.get("rank") != rank:
            continue
        seen = newest.get(e.step)
        if seen is None or e.generation >= seen[0]:
            newest[e.step] = (e.generation, e.attributes)
    return {step: attrs for step, (_, attrs) in sorted(newest.items())}


def _digests(events: list[EventRecord], run_id: str, state: str) -> dict[str, str] | None:
    """The final parameter digests; None when the run completed without them."""
    done = [e for e in events if e.type == EventType.TRAINING_COMPLETE]
    if not done:
        raise RunwrightError(
            f"run {run_id} has not completed its training (state {state}, no TRAINING_COMPLETE "
            "event): compare runs that finished their last step"
        )
    digests = done[-1].attributes.get("parameter_digests")
    return dict(digests) if isinstance(digests, dict) and digests else None


NO_DIGESTS = (
    "parameters: run {run} reported no parameter digests; the library digests the state its "
    "checkpointer holds when the context closes (ctx.checkpointer() with save and restore, the "
    "README's full integration)"
)
NO_SAMPLES = (
    "ledger: neither run reported the sample range of its steps; the library reports it for a "
    "script that reads through runwright.data.DataLoader"
)
NO_ID_RANGES = (
    "global batches: a run of another world size reported no sample id ranges with its steps "
    "([first, end), as runwright.data.DataLoader adds them), so coverage cannot be compared"
)
NO_LOSS = "loss: neither run reported a loss with its steps (ctx.step_healthy(step, loss=...))"


def _is_range(samples: object) -> bool:
    """Whether a step's `samples` is the loader's [first, end) range of global sample ids."""
    return (
        isinstance(samples, list | tuple)
        and len(samples) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in samples)
    )


def _global_batches(events: list[EventRecord]) -> dict[int, tuple[tuple[int, int], ...]]:
    """step -> the global sample ids of its batch, as merged [first, end) ranges: the union of
    what every rank of the newest generation that trained the step reported."""
    newest: dict[int, int] = {}
    ranges: dict[tuple[int, int], set[tuple[int, int]]] = {}
    for e in per_rank(events):
        samples = e.attributes.get("samples")
        if e.type != EventType.STEP_HEALTHY or e.step is None or not _is_range(samples):
            continue  # a script's own `samples` (a count, say) says nothing of which ones
        newest[e.step] = max(newest.get(e.step, 0), e.generation)
        ranges.setdefault((e.step, e.generation), set()).add((int(samples[0]), int(samples[1])))
    return {step: _merged(ranges[(step, gen)]) for step, gen in sorted(newest.items())}


def _merged(ranges: set[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for first, end in sorted(ranges):
        if out and first <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((first, end))
    return tuple(out)


RESHAPED_NOTE = (
    "the runs trained at different world sizes ({a} and {b}): gradients are summed in another "
    "order, so bitwise equality is not expected when the reduction order changes; equivalence "
    "here means the same consumed-sample ledger and the same global batch at every step, with "
    "the final parameters compared by distance"
)


def compare_runs(store: Store, run_a: str, run_b: str) -> Comparison:
    a, b = store.get_run(run_a), store.get_run(run_b)
    events_a, events_b = store.events(a.run_id), store.events(b.run_id)
    digests_a = _digests(events_a, a.run_id, a.state)
    digests_b = _digests(events_b, b.run_id, b.state)
    missing = [
        NO_DIGESTS.format(run=run.run_id)
        for run, digests in ((a, digests_a), (b, digests_b))
        if digests is None
    ]
    if missing:
        digests_a, digests_b = {}, {}
    restored = sorted(
        {int(e.step or 0) for e in events_a + events_b if e.type == EventType.RESTORED and e.step}
    )
    sizes_a = tuple(x.world_size for x in store.attempts(a.run_id))
    sizes_b = tuple(x.world_size for x in store.attempts(b.run_id))
    reshaped = set(sizes_a) != set(sizes_b) or len(set(sizes_a)) > 1
    differing = [
        name
        for name in sorted(set(digests_a) | set(digests_b))
        if digests_a.get(name) != digests_b.get(name)
    ]
    lineage_a, lineage_b = _lineage(events_a), _lineage(events_b)
    contaminated = contaminated_ranges(events_a) + contaminated_ranges(events_b)
    steps = sorted(set(lineage_a) | set(lineage_b))
    reported = [r for lineage in (lineage_a, lineage_b) for r in lineage.values()]
    if not any("samples" in r for r in reported):
        missing.append(NO_SAMPLES)
    if not any("loss" in r for r in reported):
        missing.append(NO_LOSS)
    ledger_step = next(
        (
            step
            for step in steps
            if lineage_a.get(step, {}).get("samples") != lineage_b.get(step, {}).get("samples")
        ),
        None,
    )
    batches_a, batches_b = _global_batches(events_a), _global_batches(events_b)
    if reshaped and not (batches_a and batches_b):
        # Across world sizes the global batches are the coverage proof: none is no proof.
        missing.append(NO_ID_RANGES)
    batch_step = next(
        (
            s
            for s in sorted(set(batches_a) | set(batches_b))
            if batches_a.get(s) != batches_b.get(s)
        ),
        None,
    )
    first: str | None = None
    if differing and not reshaped:
        first = f"parameters:{differing[0]}"
    elif ledger_step is not None:
        first = f"ledger:step {ledger_step}"
    elif batch_step is not None:
        first = f"global batch:step {batch_step}"
    elif not reshaped:
        after = min(restored, default=0)
        for step in steps:
            if any(r.holds(step) for r in contaminated):
                continue  # marked unusable: left out of comparisons (control/contamination.py)
            if step > after and lineage_a.get(step, {}).get("loss") != lineage_b.get(step, {}).get(
                "loss"
            ):
                first = f"loss:step {step}"
                break
    # Reported whenever the world sizes differ, even at zero: a reduction of two equal-sized
    # halves may happen to round the same way, and the reader should see by how much it did.
    distance = None
    if reshaped and first is None and not missing:
        try:
            distance = parameter_difference(a, b)
        except RunwrightError as exc:
            missing.append(f"parameter difference: {exc}")
    if first:
        equivalence = "different"
    elif missing:
        equivalence = "incomplete"
    elif differing:
        equivalence = "coverage-equivalent"
    else:
        equivalence = "bitwise-equal"
    return Comparison(
        run_a=a.run_id,
        run_b=b.run_id,
        equivalence=equivalence,
        first_difference=first,
        parameters_compared=len(digests_a),
        steps_compared=len(steps),
        restored_steps=restored,
        missing=tuple(missing),
        world_sizes_a=sizes_a,
        world_sizes_b=sizes_b,
        ledger_identical=ledger_step is None,
        global_batches_identical=batch_step is None,
        parameter_difference=distance,
        note=RESHAPED_NOTE.format(a=list(sizes_a), b=list(sizes_b)) if reshaped else "",
        contaminated_steps=tuple((r.first_step, r.last_step) for r in contaminated),
    )
