"""Recovery equivalence (seed 004, "proving recovery equivalence"): is a run that failed and
recovered the same run as one that never failed?

For `bitwise` reproducibility three things must hold between the two runs:
- final parameters are bit-identical (the trainer records a sha256 of every parameter's bytes);
- the consumed-sample ledgers are identical: each optimizer step consumed the same global sample
  range (the surviving lineage of a recovered run: a replayed step's last report wins);
- the loss curves are identical after the restored step (replayed steps reproduce the loss).
"""

from typing import Any

from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.records import Record
from runwright.store import EventRecord, Store


class Comparison(Record):
    run_a: str
    run_b: str
    equivalence: str
    """`bitwise-equal`, or `different`."""
    first_difference: str | None
    """The first differing key: `parameters:<name>`, `ledger:step <n>` or `loss:step <n>`."""
    parameters_compared: int
    steps_compared: int
    restored_steps: list[int]
    """Steps the runs restored from (the recovered run's checkpoints)."""


def _lineage(events: list[EventRecord], rank: int = 0) -> dict[int, dict[str, Any]]:
    """step -> the newest generation's report of it (what the surviving lineage computed)."""
    newest: dict[int, tuple[int, dict[str, Any]]] = {}
    for e in events:
        if e.type != EventType.STEP_HEALTHY or e.step is None or e.attributes.get("rank") != rank:
            continue
        seen = newest.get(e.step)
        if seen is None or e.generation >= seen[0]:
            newest[e.step] = (e.generation, e.attributes)
    return {step: attrs for step, (_, attrs) in sorted(newest.items())}


def _digests(events: list[EventRecord], run_id: str) -> dict[str, str]:
    done = [e for e in events if e.type == EventType.TRAINING_COMPLETE]
    if not done:
        raise RunwrightError(
            f"run {run_id} has no TRAINING_COMPLETE event with parameter "
            "digests; compare runs of the reference trainer that finished"
        )
    return dict(done[-1].attributes["parameter_digests"])


def compare_runs(store: Store, run_a: str, run_b: str) -> Comparison:
    a, b = store.get_run(run_a), store.get_run(run_b)
    events_a, events_b = store.events(a.run_id), store.events(b.run_id)
    digests_a, digests_b = _digests(events_a, a.run_id), _digests(events_b, b.run_id)
    restored = sorted(
        {int(e.step or 0) for e in events_a + events_b if e.type == EventType.RESTORED and e.step}
    )
    first: str | None = None
    for name in sorted(set(digests_a) | set(digests_b)):
        if digests_a.get(name) != digests_b.get(name):
            first = f"parameters:{name}"
            break
    lineage_a, lineage_b = _lineage(events_a), _lineage(events_b)
    steps = sorted(set(lineage_a) | set(lineage_b))
    if first is None:
        for step in steps:
            if lineage_a.get(step, {}).get("samples") != lineage_b.get(step, {}).get("samples"):
                first = f"ledger:step {step}"
                break
    if first is None:
        after = min(restored, default=0)
        for step in steps:
            if step > after and lineage_a.get(step, {}).get("loss") != lineage_b.get(step, {}).get(
                "loss"
            ):
                first = f"loss:step {step}"
                break
    return Comparison(
        run_a=a.run_id,
        run_b=b.run_id,
        equivalence="bitwise-equal" if first is None else "different",
        first_difference=first,
        parameters_compared=len(digests_a),
        steps_compared=len(steps),
        restored_steps=restored,
    )
