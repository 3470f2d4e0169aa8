"""Recovery from silent data corruption (failure class `sdc`; runtime/integrity.py finds it).

The group reported SDC_DETECTED at a step boundary and raised SilentDataCorruptionError on every
rank. Its own event is the strongest evidence, stronger than the error files (which only say that
every rank stopped): it names the suspect ranks and their hosts, the kind of check that failed,
and the last step a check passed at. From it recovery

- classifies the failure `sdc` with the suspects' hosts (a single suspect's rank when a
  majority named one; none when two replicas disagreed and either may be the bad one);
- quarantines those hosts: FAILURE_CLASSIFIED carries them as `quarantined_hosts`, which the
  allocation's exclusion reads like a lost node's (control/allocation.py; an executor drops the
  exclusion when too few other nodes are left, and a local run has only its own machine), and a
  restart in an allocation that holds one is requeued;
- restores no checkpoint newer than the known-good step (`restore_at_most_step`, as an alert's
  rollback does); the checkpoints after it were marked SUSPECT by the group itself, so a later
  restart skips them too. Nothing is skipped: the batches were good, the state was not.
"""

from runwright.control.failures import Classification
from runwright.events import EventType
from runwright.spec import FailureClass
from runwright.store import EventRecord


def detection(events: list[EventRecord], generation: int) -> EventRecord | None:
    """Generation `generation`'s SDC_DETECTED, if it reported one."""
    return next(
        (e for e in events if e.type == EventType.SDC_DETECTED and e.generation == generation),
        None,
    )


def quarantined_hosts(found: EventRecord) -> list[str]:
    return [str(h) for h in found.attributes.get("hosts") or ()]


def known_good_step(found: EventRecord) -> int:
    return int(found.attributes.get("known_good_step") or 0)


def classify_sdc(
    found: EventRecord, failure: Classification, last_step: int | None
) -> Classification:
    """The generation's classification as `sdc`, unless the group was preempted or lost a node
    first (then that is the cause and the detection rides along in its evidence)."""
    if failure.failure_class in (FailureClass.PREEMPTION, FailureClass.NODE_LOST):
        return failure
    a = found.attributes
    ranks = [int(r) for r in a.get("ranks") or ()]
    hosts = quarantined_hosts(found)
    message = (
        f"silent data corruption at step {found.step} ({a.get('kind')}): {a.get('detail')}; "
        f"rolling back to the checkpoint at or before step {known_good_step(found)}"
    )
    return Classification(
        failure_class=FailureClass.SDC,
        rank=ranks[0] if len(ranks) == 1 else None,
        message=message,
        step=last_step,
        signature=f"{FailureClass.SDC}|{a.get('kind')}|ranks={ranks}|step={found.step}",
        evidence=f"SDC_DETECTED event (suspect ranks {ranks}, hosts {hosts})",
        host=", ".join(hosts) or None,
        error_lines=failure.error_lines,
    )
