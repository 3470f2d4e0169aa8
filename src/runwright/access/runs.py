"""Run actions: submit, cancel, pause, resume, list, status, events, compare, report, queue."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright.access.base import AccessBase
from runwright.access.redaction import (
    event_view,
    report_view,
    scrub,
    summary_view,
    worker_text,
)
from runwright.access.roles import Permission
from runwright.errors import NotFoundError, RunwrightError, SpecError
from runwright.events import EventType

if TYPE_CHECKING:  # imported where used: the CLI's read commands load neither the controller
    # nor the spec models (issue 19: `status`, `list`, `events` start in under a second)
    from collections.abc import Callable

    from runwright.control.controller import Controller
    from runwright.spec import JobSpec
    from runwright.store import WriteResult

QUEUE_LIMIT = 10_000
"""Most unfinished runs one queue listing shows."""
FOLLOW_POLL_SECONDS = 0.5
"""How often a local follow looks for new events (what `events --follow` always did)."""


class RunActions(AccessBase):
    # -- reading ------------------------------------------------------------------------------

    def list_runs(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest runs of the actor's project, as `runwright list --json` prints them."""
        out = []
        for run in self.store.list_runs(limit=limit, project=self.actor.project):
            row = run.model_dump(mode="json", exclude={"spec", "plan"})
            row["state_detail"] = worker_text(row["state_detail"], self.disclosure(run))
            out.append(row)
        return out

    def status(self, run_id: str, with_events: bool = True) -> dict[str, Any]:
        """`run_summary` of a run, as the actor may see it; without its event log when
        `with_events` is False (what `status` prints needs none of it, and a long run's log is
        most of the answer)."""
        from runwright.control.summary import run_summary

        run = self.run(run_id)
        summary = run_summary(self.store, run.run_id, with_events=with_events)
        summary["project"], summary["submitted_by"] = run.project, run.submitted_by
        return summary_view(summary, self.disclosure(run))

    def events(
        self,
        run_id: str,
        after_seq: int = 0,
        types: list[str] | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        run = self.run(run_id)
        disclosure = self.disclosure(run)
        batch = self.store.events(run.run_id, after_seq=after_seq, types=types or None, limit=limit)
        return [event_view(e.model_dump(mode="json"), disclosure) for e in batch]

    def run_state(self, run_id: str) -> str:
        return self.run(run_id).state

    def follow(
        self, run_id: str, after_seq: int = 0, types: list[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every event after `after_seq` as it is stored, until the run's RUN_FINISHED, or until
        a terminal or paused run has stayed quiet for a second (its controller is gone, or it
        waits for a person)."""
        from runwright.control.states import AT_REST

        quiet = 0
        while True:
            batch = self.events(run_id, after_seq)
            for event in batch:
                after_seq = event["seq"]
                if not types or event["type"] in types:
                    yield event
            if any(e["type"] == EventType.RUN_FINISHED for e in batch):
                return
            quiet = quiet + 1 if self.run_state(run_id) in AT_REST and not batch else 0
            if quiet >= 2:
                return
            time.sleep(FOLLOW_POLL_SECONDS)

    def compare(self, run_a: str, run_b: str) -> dict[str, Any]:
        from runwright.govern.compare import compare_runs

        a, b = self.run(run_a), self.run(run_b)
        return compare_runs(self.store, a.run_id, b.run_id).model_dump(mode="json")

    def report(self, run_id: str) -> tuple[dict[str, Any], str]:
        """(report.json's content, report.html's text), secrets masked and worker text redacted
        as the actor may see it; nothing is written."""
        from runwright.govern.performance import record_report_hash
        from runwright.govern.report import render_report

        run = self.run(run_id)
        disclosure = self.disclosure(run)
        report, html = render_report(
            self.store,
            run.run_id,
            view=lambda r: report_view(r, disclosure),
            events_view=lambda events: scrub(
                [event_view(e, disclosure) for e in events], disclosure.secrets
            ),
        )
        if report.report_sha256:
            record_report_hash(self.store, run.run_id, run.generation, report.report_sha256)
        return report.model_dump(mode="json"), html

    def queue(self) -> list[dict[str, Any]]:
        """The unfinished runs of the actor's project, oldest first, each with its pool,
        priority and requested shape (nodes x devices per node, from its spec) and what it waits
        for (its state detail: a pending reason with its queue position, a recovery's
        backoff)."""
        from runwright.control.states import TERMINAL, RunState

        unfinished = [s.value for s in RunState if s not in TERMINAL]
        runs = self.store.list_runs(
            limit=QUEUE_LIMIT, states=unfinished, project=self.actor.project
        )
        return [
            {
                "run_id": r.run_id,
                "name": r.name,
                "project": r.project,
                "submitted_by": r.submitted_by,
                "state": r.state,
                "generation": r.generation,
                "last_step": r.last_step,
                "waiting_for": worker_text(r.state_detail, self.disclosure(r)),
                "created_unix_s": r.created_unix_s,
                **_requested(r.spec),
            }
            for r in reversed(runs)
        ]

    # -- changing -----------------------------------------------------------------------------

    def submit(
        self,
        spec: "JobSpec | dict[str, Any]",
        *,
        idempotency_key: str | None = None,
        workdir: Path | None = None,
        source: str = "<submitted spec>",
        controller: "Controller | None" = None,
    ) -> dict[str, Any]:
        """Record a run in the actor's project (not started here: a controller drives it).
        `workdir` is the spec file's folder for a CLI on the store; through the server the
        spec has no folder, and relative paths resolve against the server's root. The same
        idempotency key within a project returns the existing run. `controller` is the CLI's
        foreground controller: it holds the new run's lease from the transaction that creates
        it, so a daemon sharing the store cannot take the run before it drives it."""
        from runwright.control.controller import Controller
        from runwright.govern.preflight import check_spec
        from runwright.spec import spec_from_mapping

        project = self.home_project
        params: dict[str, Any] = {"idempotency_key": idempotency_key}
        self.require(Permission.SUBMIT, "submitting a run", "run.submit", parameters=params)
        if isinstance(spec, dict):  # through the server: validated here, after the role check
            try:
                spec = spec_from_mapping(spec, source)
            except SpecError as exc:
                first = str(exc).splitlines()[0]  # the count, not values that may be secrets
                self.record("run.submit", outcome="failed", detail=first, parameters=params)
                raise
        params |= {"name": spec.name, "spec_hash": spec.spec_hash}
        # The datasets' use policies, before anything else may allocate (access/datasets.py).
        self.check_use(spec, workdir or self.root, project, params)  # type: ignore[attr-defined]
        try:
            if workdir is None:
                _check_remote_paths(spec)
            preflight = check_spec(spec, workdir or self.root)
            if not preflight.ok:
                count = len(preflight.problems)
                raise SpecError(
                    f"{source}: the spec does not fit what it names ({count} problem"
                    f"{'s' if count != 1 else ''})",
                    list(preflight.problems),
                )
            self._require_dataset(spec, workdir or self.root)
        except NotFoundError as exc:
            raise self.refuse(exc, "run.submit", parameters=params) from None
        except RunwrightError as exc:
            self.record("run.submit", outcome="failed", detail=str(exc), parameters=params)
            raise
        # Keys are namespaced by project, so one project's key never returns another's run.
        key = f"{project}/{idempotency_key}" if idempotency_key is not None else None
        holding = controller is not None
        controller = controller or Controller(self.store, self.root, pools_file=self.pools_file)
        try:
            run, created = controller.submit(
                spec,
                workdir or self.root,
                key,
                project=project,
                submitted_by=self.actor.name,
                hold=holding,
            )
        except RunwrightError as exc:  # the spec's pool can never place it (PlacementError)
            self.record("run.submit", outcome="failed", detail=str(exc), parameters=params)
            raise
        self.record(
            "run.submit",
            project=project,
            target=run.run_id,
            parameters={**params, "created": created},
            detail=None if created else "idempotency key already used: the existing run",
        )
        return {"run_id": run.run_id, "created": created, "state": run.state, "project": project}

    def cancel(self, run_id: str, reason: str) -> dict[str, Any]:
        """Cancel (request_cancel): anyone with CANCEL_ANY, or the submitter with CANCEL_OWN.
        The actor is written into the run's own log, so the report names who intervened."""
        from runwright.control.cancel import request_cancel

        return self._intervene("run.cancel", "cancelling", run_id, reason, request_cancel)

    def pause(self, run_id: str, reason: str) -> dict[str, Any]:
        """Pause (control/pause.py) under the same rule as cancel: the submitter its own run
        with CANCEL_OWN, anyone with CANCEL_ANY."""
        from runwright.control.pause import request_pause

        return self._intervene("run.pause", "pausing", run_id, reason, request_pause)

    def resume(self, run_id: str, reason: str) -> dict[str, Any]:
        """Resume a paused run (control/pause.py), under the same rule as pause."""
        from runwright.control.pause import request_resume

        return self._intervene("run.resume", "resuming", run_id, reason, request_resume)

    def _intervene(
        self,
        action: str,
        doing: str,
        run_id: str,
        reason: str,
        request: "Callable[..., WriteResult]",
        target: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A person's intervention on a run: allowed to its submitter (CANCEL_OWN) or an
        operator (CANCEL_ANY), audited (with `target`: what an operator action names), and
        written into the run's own log with the actor."""
        run = self.run(run_id, action=action)
        params = {"reason_chars": len(reason), **(target or {})}
        self.require_intervention(run, doing, action, params)
        result = request(self.store, run.run_id, reason, actor=self.actor.name)
        self.record(
            action,
            project=run.project,
            target=run.run_id,
            parameters={**params, "outcome": str(result.outcome)},
            detail=result.detail or None,
        )
        moved = result.run or run
        return {
            "run_id": moved.run_id,
            "outcome": str(result.outcome),
            "detail": result.detail,
            "state": moved.state,
            "generation": moved.generation,
            "last_step": moved.last_step,
        }

    def _require_dataset(self, spec: "JobSpec", workdir: Path) -> None:
        """Through the server, a spec may name only a dataset granted to its project."""
        if self.actor.project is None or spec.data.dataset is None:
            return
        from runwright.data.format.manifest import read_manifest
        from runwright.govern.preflight import dataset_folder

        folder = dataset_folder(spec, workdir)
        if folder is None:
            return  # a URL: read by the workers with their own credentials (docs/server.md)
        dataset_id = read_manifest(folder).dataset_id
        if not self.identity.dataset_granted(self.actor.project, dataset_id):
            raise NotFoundError(
                f"data.dataset {spec.data.dataset}: no dataset {dataset_id[:16]}... in project "
                f"{self.actor.project}; a site admin grants it with `runwright data grant`"
            )


def _check_remote_paths(spec: "JobSpec") -> None:
    """A spec sent to a server has no folder: a relative script path cannot be found there."""
    entry = spec.code.entrypoint
    if not entry.startswith("module:") and not Path(entry).is_absolute():
        raise SpecError(
            f"code.entrypoint {entry!r} is a path relative to the spec's folder, which the "
            "server does not have: give `module:NAME` (an installed module) or an absolute path "
            "that exists on the server's hosts"
        )


def _requested(spec: dict[str, Any]) -> dict[str, Any]:
    """What a run asked the scheduler for, read from its stored spec as written (the spec's
    defaults where a field is absent): pool, priority, preemptible, nodes, devices per node."""
    resources = spec.get("resources") or {}
    return {
        "pool": resources.get("pool", "default"),
        "priority": resources.get("priority", 0),
        "preemptible": bool(resources.get("preemptible", False)),
        "nodes": resources.get("nodes", 1),
        "devices_per_node": resources.get("devices_per_node", 1),
    }
