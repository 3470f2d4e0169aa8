"""Release actions: request a release of a run's checkpoint (operators), approve or reject one
(admins, never the requester through the server), and read the model registry (viewers); every
change audited (govern/release.py does the work)."""

from typing import Any

from runwright.access.base import AccessBase
from runwright.access.roles import AccessDenied, Permission
from runwright.errors import RunwrightError


class ReleaseActions(AccessBase):
    def release_request(
        self,
        target: str,
        checkpoint: str = "latest",
        name: str | None = None,
        format: str = "auto",
        limits: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Export checkpoint `checkpoint` of run `target` as the next version of model `name`,
        run the release gates and record the outcome (BLOCKED or AWAITING_APPROVAL)."""
        from runwright.ckpt.export import ExportFormat
        from runwright.govern.release import request_release
        from runwright.govern.release_gates import GateLimits

        action = "release.request"
        params = {"checkpoint": checkpoint[:200], "name": (name or "")[:200], "format": format}
        run = self.run(target, action)
        self.require(
            Permission.MANAGE_CHECKPOINTS, "requesting a release", action, target=run.run_id,
            parameters=params,
        )  # fmt: skip
        try:
            fmt = ExportFormat(format)
        except ValueError:
            raise RunwrightError(
                f"--format {format[:40]!r} is not an export layout; use auto, hf-gpt2 or runwright"
            ) from None
        try:
            gate_limits = GateLimits.model_validate(limits or {})
            row = request_release(
                self.store, run, checkpoint=checkpoint, name=name, format=fmt,
                limits=gate_limits, requested_by=self.actor.name,
            )  # fmt: skip
        except (RunwrightError, ValueError) as exc:
            error = exc if isinstance(exc, RunwrightError) else RunwrightError(str(exc))
            self.record(
                action, target=run.run_id, parameters=params, outcome="failed",
                detail=str(error),
            )  # fmt: skip
            raise error from None
        self.record(
            action,
            target=run.run_id,
            parameters={
                **params,
                "release_id": row.release_id,
                "version": row.version,
                "status": row.status.value,
            },
        )
        return row.model_dump(mode="json")

    def release_decide(
        self, release_id: str, approve: bool, note: str | None = None
    ) -> dict[str, Any]:
        """Approve or reject a release awaiting approval."""
        from runwright.govern.release import decide_release

        action = "release.approve" if approve else "release.reject"
        target = f"release:{release_id[:64]}"
        row = self.store.releases.get(release_id, project=self.actor.project)
        self.require(
            Permission.APPROVE_RELEASE,
            "approving or rejecting a release",
            action,
            target=target,
        )
        try:
            done = decide_release(
                self.store,
                row.release_id,
                approve=approve,
                by=self.actor.name,
                authenticated=self.actor.via == "api",
                note=note,
                project=self.actor.project,
            )
        except RunwrightError as exc:
            four_eyes = "four eyes" in str(exc)
            error = AccessDenied(str(exc)) if four_eyes else exc
            self.record(
                action,
                target=target,
                outcome="denied" if four_eyes else "failed",
                detail=str(error),
            )
            raise error from None
        self.record(action, target=target, parameters={"status": done.status.value})
        return done.model_dump(mode="json")

    def release_list(self, name: str | None = None, run: str | None = None) -> list[dict]:
        """The registry's releases of the actor's project, newest first."""
        run_ids = [self.run(run).run_id] if run else None
        rows = self.store.releases.find(project=self.actor.project, name=name, run_ids=run_ids)
        return [r.model_dump(mode="json") for r in rows]

    def release_show(self, release_id: str) -> dict[str, Any]:
        return self.store.releases.get(release_id, project=self.actor.project).model_dump(
            mode="json"
        )
