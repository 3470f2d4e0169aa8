"""Operator actions on a run (control/operator.py): roll back to a chosen checkpoint, skip a bad
shard, move to another pool, stop with a save.

Role rule: as for cancel and pause, the submitter on their own run (CANCEL_OWN) and an operator
on any (CANCEL_ANY); moving a run to another pool takes an operator whoever submitted it (a pool
is the site's, not the run's). Each is audited (`run.rollback`, `run.skip_shard`,
`run.move_pool`, `run.stop`) with its target, and written into the run's own log with the actor.
"""

import functools
from typing import Any

from runwright.access.roles import Permission
from runwright.access.runs import RunActions


class OperatorActions(RunActions):
    def rollback(self, run_id: str, reason: str, checkpoint: str) -> dict[str, Any]:
        """Roll a live run back to `checkpoint` (its step, id or folder)."""
        from runwright.control.operator import request_rollback

        request = functools.partial(request_rollback, checkpoint=checkpoint)
        return self._intervene(
            "run.rollback", "rolling back", run_id, reason, request, {"checkpoint": checkpoint}
        )

    def skip_shard(self, run_id: str, reason: str, shard: str) -> dict[str, Any]:
        """Skip train shard `shard` from the step the run next starts at."""
        from runwright.control.operator import request_skip_shard

        request = functools.partial(request_skip_shard, shard=shard)
        return self._intervene(
            "run.skip_shard", "skipping a shard of", run_id, reason, request, {"shard": shard}
        )

    def move_pool(self, run_id: str, reason: str, pool: str) -> dict[str, Any]:
        """Move a run to pool `pool`: an operator's action only."""
        from runwright.control.operator import request_move_pool

        run = self.run(run_id, action="run.move_pool")
        self.require(
            Permission.CANCEL_ANY,
            "moving a run to another pool",
            "run.move_pool",
            target=run.run_id,
            project=run.project,
            parameters={"pool": pool},
        )
        request = functools.partial(request_move_pool, pool=pool, pools_file=self.pools_file)
        return self._intervene(
            "run.move_pool", "moving", run.run_id, reason, request, {"pool": pool}
        )

    def stop_with_save(self, run_id: str, reason: str) -> dict[str, Any]:
        """Stop a live run at its next step boundary with a save; it ends CANCELLED."""
        from runwright.control.operator import request_stop_with_save

        return self._intervene("run.stop", "stopping", run_id, reason, request_stop_with_save)
