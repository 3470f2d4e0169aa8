"""Dashboard reads (issue 15): the runs table with its filters, a run page's live data and the
compare view, each only inside the actor's project and redacted as its role requires (the same
`report_view` / `event_view` the API's report and events use)."""

import time
from typing import Any

from runwright.access.base import AccessBase
from runwright.access.redaction import (
    MASK,
    SECRET_NAME,
    event_view,
    report_view,
    scrub,
    worker_text,
)

RUNS_SHOWN = 500
"""Most runs one runs page lists (newest first)."""
MAX_COMPARED = 8
"""Most runs one compare view overlays: beyond that the curves cannot be told apart."""


class DashboardActions(AccessBase):
    def dashboard_runs(
        self,
        state: str | None = None,
        owner: str | None = None,
        tag: str | None = None,
        name: str | None = None,
        limit: int = RUNS_SHOWN,
    ) -> list[dict[str, Any]]:
        """The project's newest runs matching every filter given: `state` exactly, `owner`
        as the spec's governance owner or the submitter, `tag` as `key` or `key=value` of the
        spec's governance tags, `name` as a substring of the run's name or id."""
        rows = []
        states = [state] if state else None
        for run in self.store.list_runs(limit=limit, states=states, project=self.actor.project):
            governance = (run.spec or {}).get("governance") or {}
            tags = {str(k): str(v) for k, v in (governance.get("tags") or {}).items()}
            spec_owner = str(governance.get("owner", "unknown"))
            if owner and owner not in (spec_owner, run.submitted_by):
                continue
            if tag and not _tag_matches(tags, tag):
                continue
            if name and name not in run.name and name not in run.run_id:
                continue
            disclosure = self.disclosure(run)
            rows.append(
                {
                    "run_id": run.run_id,
                    "name": run.name,
                    "state": run.state,
                    "terminal_reason": run.terminal_reason,
                    "state_detail": worker_text(run.state_detail, disclosure),
                    "generation": run.generation,
                    "last_step": run.last_step,
                    "steps": ((run.spec or {}).get("training") or {}).get("steps"),
                    "owner": spec_owner,
                    "submitted_by": run.submitted_by,
                    "tags": scrub(tags, disclosure.secrets),
                    "created_unix_s": run.created_unix_s,
                    "updated_unix_s": run.updated_unix_s,
                }
            )
        return rows

    def run_view(self, run_id: str) -> dict[str, Any]:
        """A run page's data: the report's figures and charts' series, checkpoints, mixture,
        cost, open alerts and the newest events."""
        from runwright.govern.dashboard import run_view
        from runwright.govern.report import collect_report

        run = self.run(run_id)
        disclosure = self.disclosure(run)
        report, timeline = collect_report(self.store, run.run_id)
        content = report_view(report.model_dump(mode="json"), disclosure)
        events = [
            event_view(e.model_dump(mode="json"), disclosure) for e in self.store.events(run.run_id)
        ]
        return run_view(content, timeline, scrub(events, disclosure.secrets), time.time())

    def compare_view(self, run_ids: list[str]) -> dict[str, Any]:
        """Two to `MAX_COMPARED` runs of the project overlaid, with the effective configuration
        of each later run diffed against the first's."""
        from runwright.errors import RunwrightError
        from runwright.govern.dashboard import compare_view
        from runwright.govern.effective import differences, recorded_config
        from runwright.govern.report import collect_report

        if not 2 <= len(run_ids) <= MAX_COMPARED:
            raise RunwrightError(f"compare 2 to {MAX_COMPARED} runs; {len(run_ids)} were given")
        runs, configs = [], []
        for run_id in run_ids:
            run = self.run(run_id)
            disclosure = self.disclosure(run)
            report, timeline = collect_report(self.store, run.run_id)
            runs.append((report_view(report.model_dump(mode="json"), disclosure), timeline))
            config = recorded_config(run, self.store.events(run.run_id))
            configs.append(scrub(_mask_config(config), disclosure.secrets))
        diffs = [differences(configs[0], config) for config in configs[1:]]
        return compare_view(runs, diffs)


def _tag_matches(tags: dict[str, str], wanted: str) -> bool:
    key, sep, value = wanted.partition("=")
    return key in tags and (not sep or tags[key] == value)


def _mask_config(config: dict[str, Any]) -> dict[str, Any]:
    """A flattened effective configuration with each secret-looking `environment.env.NAME`
    shown as `***` (what `mask_spec` does to a nested spec)."""
    return {
        name: MASK
        if name.startswith("environment.env.") and SECRET_NAME.search(name.rsplit(".", 1)[-1])
        else value
        for name, value in config.items()
    }
