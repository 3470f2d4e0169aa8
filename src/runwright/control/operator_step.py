"""The controller's side of an operator's action (control/operator.py has the request side and
what each action does): once the live group asked to stop for it has stopped, apply it and
record OPERATOR_ACTION_APPLIED with the effect in words."""

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from runwright.control.journal import Journal
from runwright.control.operator import (
    MOVE_POOL,
    ROLLBACK,
    STOP_REASON,
    STOP_WITH_SAVE,
    move_spec,
    record_applied,
)
from runwright.control.states import RunState, TerminalReason
from runwright.events import EventType
from runwright.store import EventRecord, RunRecord, Store

if TYPE_CHECKING:
    from runwright.control.supervision import Supervision


class OperatorStep:
    """Applies an operator's action once the group asked to stop for it has stopped."""

    def __init__(
        self, store: Store, journal: Journal, release: Callable[[RunRecord, str], bool]
    ) -> None:
        self.store = store
        self.journal = journal
        self.release = release

    def asked(self, run: RunRecord, reason: str | None) -> EventRecord | None:
        """The operator's request the current generation stopped for (`reason`), if any."""
        if reason not in STOP_REASON.values():
            return None
        for e in reversed(
            self.store.events(run.run_id, types=[EventType.OPERATOR_ACTION_REQUESTED])
        ):
            a = e.attributes
            if (
                a.get("stopping_generation") == run.generation
                and STOP_REASON.get(str(a.get("action"))) == reason
            ):
                return e
        return None

    def stopped(
        self, run: RunRecord, sup: "Supervision", exit_code: int, request: EventRecord
    ) -> bool:
        """Apply `request` to the run whose group stopped (module doc); False while the engine
        cannot be reached to give a moved run's allocation back (the next pass tries again)."""
        action = request.attributes.get("action")
        latest = self.store.checkpoints.latest(run.run_id)  # the fence's pointer
        newest = latest.step if latest is not None else None
        at = self._stop_step(run)
        if action == MOVE_POOL:
            pool = str(request.attributes["pool"])
            if not self.release(run, f"moving to pool {pool}"):
                return False
            sup.end_attempt(self.store, run.run_id, exit_code, None)
            effect = move_spec(self.store, run, pool)
            effect = f"stopped at step {at} (saved: step {newest}); {effect}"
            record_applied(self.journal, run, request, effect, saved_step=newest)
            self.journal.move(run, RunState.PAUSED, detail=f"moving to pool {pool}")
            moved = self.store.get_run(run.run_id)
            self.journal.move(moved, RunState.QUEUED, detail=f"moved to pool {pool}")
            return True
        sup.end_attempt(self.store, run.run_id, exit_code, None)
        if action == STOP_WITH_SAVE:
            said = (
                f"saved at step {newest}"
                if newest == at
                else f"nothing was saved at the stop; the newest checkpoint is at step {newest}"
            )
            words = f"stopped by an operator at step {at} ({said})"
            record_applied(self.journal, run, request, words, saved_step=newest)
            self.journal.finish(run, RunState.CANCELLED, TerminalReason.USER_CANCELLED, words)
            return True
        if action == ROLLBACK:
            self._roll_back(run, request)
        else:
            shard = request.attributes.get("shard")
            words = f"skipping shard {shard}: restarting from step {newest or 0} without it"
            self._restart(run, words, restore_at_most_step=None)
            record_applied(self.journal, run, request, words, restored_step=newest or 0)
        return True

    def _stop_step(self, run: RunRecord) -> int | None:
        """The step the group stopped at (its STOP_ACKNOWLEDGED; the run's last step when it
        exited without one). After a rollback the run's last step is the newest step any
        generation reached, not where this one is."""
        acks = [
            e.step
            for e in self.store.events(run.run_id, types=[EventType.STOP_ACKNOWLEDGED])
            if e.generation == run.generation and e.step is not None
        ]
        return max(acks, default=run.last_step)

    def _roll_back(self, run: RunRecord, request: EventRecord) -> None:
        from runwright.ckpt.abandon import roll_back_to
        from runwright.ckpt.fence import open_fence
        from runwright.ckpt.storage import CheckpointStorage
        from runwright.store.fence import run_checkpoint_root

        a = request.attributes
        target = str(a["checkpoint_id"])
        who = f" by {a['actor']}" if a.get("actor") else ""
        at = self._stop_step(run)
        words = f"rolling back{who} from step {at} to checkpoint {target[:12]}"
        self.journal.move(run, RunState.RECOVERING, detail=words)
        run = self.store.get_run(run.run_id)  # the old group's generation is fenced off now
        root = run_checkpoint_root(run)
        storage = CheckpointStorage(root)
        rewound = roll_back_to(
            storage,
            open_fence(root),
            target,
            f"abandoned by a rollback to {target}: {a.get('detail')}",
        )
        from runwright.ckpt.catalog import read_committed

        self.store.checkpoints.mark_abandoned(run.run_id, list(rewound.abandoned_ids))
        chosen = read_committed(storage, rewound.folder)
        cursor = getattr(getattr(chosen, "manifest", None), "data_cursor", None)
        self.store.update_run(run.run_id, data_cursor=cursor)
        self._restart(run, words, restore_at_most_step=rewound.step)
        effect = (
            f"rolled back from step {at} to step {rewound.step} "
            f"({rewound.checkpoint_id[:12]}); abandoned {len(rewound.abandoned)} later "
            f"checkpoint{'s' if len(rewound.abandoned) != 1 else ''}"
            + (f" ({', '.join(rewound.abandoned)})" if rewound.abandoned else "")
            + f"; latest pointer: {rewound.publish}"
        )
        record_applied(
            self.journal,
            run,
            request,
            effect,
            restored_step=rewound.step,
            abandoned=list(rewound.abandoned),
        )

    def _restart(self, run: RunRecord, words: str, restore_at_most_step: int | None) -> None:
        """RECOVERING with a restart decided now: not a failure (no class, no retry spent)."""
        if RunState(run.state) is not RunState.RECOVERING:
            self.journal.move(run, RunState.RECOVERING, detail=words)
            run = self.store.get_run(run.run_id)
        now = time.time()
        self.journal.record(
            run,
            EventType.RECOVERY_STARTED,
            action="restart",
            reason=words,
            last_step=run.last_step,
            detected_unix_s=now,
            not_before_unix_s=now,
            restore_at_most_step=restore_at_most_step,
        )
