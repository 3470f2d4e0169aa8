"""Experiment actions (issue 25): create an experiment, add runs, see which can be compared, and
mark a run's contaminated steps.

An experiment belongs to the project it was created in (the actor's); its runs are runs of that
project, looked up as the actor sees them (another project's run is "no run"). Creating and
adding need SUBMIT; marking steps contaminated changes what the stop criteria and comparisons
read, so it is an intervention on the run: its submitter with CANCEL_OWN, anyone with CANCEL_ANY
(as cancel and pause). Every change is audited, a refusal as `denied`; reading needs READ.
"""

import time
from typing import Any

from runwright.access.base import AccessBase
from runwright.access.roles import Permission
from runwright.errors import NotFoundError, RunwrightError
from runwright.store.experiments import Experiment


class ExperimentActions(AccessBase):
    def experiment_create(self, name: str, owner: str, hypothesis: str) -> dict[str, Any]:
        """A new experiment in the actor's project: an owner and a hypothesis, runs later."""
        from runwright.govern.experiments import check_name

        target = f"experiment:{name[:200]}"
        self.require(Permission.SUBMIT, "creating an experiment", "experiment.create",
                     target=target)  # fmt: skip
        try:
            check_name(name)
            if not owner.strip() or not hypothesis.strip():
                raise RunwrightError("an experiment needs --owner and --hypothesis (neither empty)")
        except RunwrightError as exc:
            raise self.refuse(exc, "experiment.create", target=target) from None
        made = self._create(name, owner, hypothesis, created_by=self.actor.name, detail=None)
        if made is None:
            raise self.refuse(
                RunwrightError(
                    f"experiment {name} exists in project {self.home_project}; add runs with "
                    "`runwright experiment add`"
                ),
                "experiment.create",
                target=target,
            )
        return made.model_dump(mode="json")

    def experiment_add(self, name: str, run_ids: list[str]) -> dict[str, Any]:
        """Add runs (ids or unique prefixes) of the experiment's project; one already in it is
        kept once, in its first place."""
        target = f"experiment:{name[:200]}"
        self.require(Permission.SUBMIT, "adding runs to an experiment", "experiment.add",
                     target=target)  # fmt: skip
        experiment = self._experiment(name, "experiment.add")
        found = [self.run(r, action="experiment.add").run_id for r in run_ids]
        audit = self.audit(
            "experiment.add", project=experiment.project, target=target,
            parameters={"runs": found},
        )  # fmt: skip
        added = self.store.experiments.add_runs(
            experiment.project, name, found, self.actor.name, audit
        )
        assert added is not None  # it existed a moment ago: experiments are never removed
        return added.model_dump(mode="json")

    def experiment_show(self, name: str, reference: str | None = None) -> dict[str, Any]:
        """The experiment's runs, each comparable with the reference or not, with the reasons
        (govern/experiments.py)."""
        from runwright.govern.experiments import show_experiment

        experiment = self._experiment(name, None)
        if reference is not None:
            reference = self.run(reference).run_id
        return show_experiment(self.store, experiment, reference).model_dump(mode="json")

    def experiment_list(self) -> list[dict[str, Any]]:
        """The experiments the actor's project holds (every project's for a local CLI)."""
        return [
            e.model_dump(mode="json") for e in self.store.experiments.of_project(self.actor.project)
        ]

    def run_contaminate(
        self, run_id: str, first_step: int, last_step: int, reason: str
    ) -> dict[str, Any]:
        """Mark steps first_step..last_step of a run contaminated (control/contamination.py)."""
        from runwright.control.contamination import mark_contaminated

        run = self.run(run_id, action="run.contaminate")
        params = {"first_step": first_step, "last_step": last_step}
        self.require_intervention(run, "marking steps of", "run.contaminate", params)
        try:
            mark = mark_contaminated(
                self.store, run.run_id, first_step, last_step, reason, self.actor.name
            )
        except RunwrightError as exc:
            raise self.refuse(exc, "run.contaminate", target=run.run_id, project=run.project,
                              parameters=params) from None  # fmt: skip
        self.record("run.contaminate", project=run.project, target=run.run_id,
                    parameters=params, detail=reason)  # fmt: skip
        return {"run_id": run.run_id, **mark.model_dump(mode="json")}

    # -- helpers ---------------------------------------------------------------------------------

    def _experiment(self, name: str, action: str | None) -> Experiment:
        """The experiment `name` of the actor's project (for a CLI on the store, one an earlier
        version kept as a file under the root is read into the store first)."""
        from runwright.govern.experiments import check_name

        project = self.home_project
        found = self.store.experiments.get(project, check_name(name))
        if found is None and self.actor.project is None:
            found = self._import_legacy(name)
        if found is None:
            error = NotFoundError(
                f"no experiment {name} in project {project}; create it with "
                f"`runwright experiment create {name} --owner WHO --hypothesis TEXT`"
            )
            if action is None:
                raise error
            raise self.refuse(error, action, target=f"experiment:{name[:200]}")
        return found

    def _import_legacy(self, name: str) -> Experiment | None:
        """`<root>/experiments/<name>.json` into the store, audited as its creation and the
        adding of its runs; the file stays (a second import finds the record instead)."""
        from runwright.govern.experiments import legacy_experiment

        legacy = legacy_experiment(self.root, name)
        if legacy is None:
            return None
        made = self._create(
            name,
            str(legacy["owner"]),
            str(legacy["hypothesis"]),
            created_by=legacy.get("created_by"),
            detail=f"read from {self.root}/experiments/{name}.json",
            created_unix_s=float(legacy.get("created_unix_s") or time.time()),
        )
        found = made or self.store.experiments.get(self.home_project, name)
        runs = [r for r in legacy.get("runs") or [] if isinstance(r, str)]
        if found is None or not runs:
            return found
        audit = self.audit(
            "experiment.add", project=found.project, target=f"experiment:{name}",
            parameters={"runs": runs},
        )  # fmt: skip
        return self.store.experiments.add_runs(found.project, name, runs, found.created_by, audit)

    def _create(
        self,
        name: str,
        owner: str,
        hypothesis: str,
        *,
        created_by: str | None,
        detail: str | None,
        created_unix_s: float | None = None,
    ) -> Experiment | None:
        experiment = Experiment(
            project=self.home_project,
            name=name,
            owner=owner,
            hypothesis=hypothesis,
            created_by=created_by,
            created_unix_s=created_unix_s or time.time(),
        )
        audit = self.audit(
            "experiment.create", project=experiment.project, target=f"experiment:{name}",
            parameters={"owner": owner}, detail=detail,
        )  # fmt: skip
        return self.store.experiments.create(experiment, audit)
