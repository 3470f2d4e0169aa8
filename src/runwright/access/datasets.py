"""Dataset use policy actions: show and change a policy, withdraw a dataset, delete it (issue 25).

Who may change a dataset's policy, withdraw or delete it: the policy's `owner`, or a site admin (a
CLI on the store itself acts as one). Every attempt is audited, a refusal as `denied`; a change
and its audit record commit together (store/dataset_policies.py). Submit's refusal of a run the
policies forbid is `check_use`, called by `RunActions.submit` before the run exists.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from runwright.access.base import AccessBase
from runwright.access.roles import AccessDenied
from runwright.data.policy import PolicyVersion, Standing, UsePolicy, who_can_change
from runwright.errors import NotFoundError, RunwrightError

if TYPE_CHECKING:
    from runwright.spec import JobSpec


class PolicyRefused(RunwrightError):
    """A run that the use policy of a dataset it names forbids; the message names the dataset,
    the policy field and who can change the policy."""


class DataContractActions(AccessBase):
    def dataset_policy(self, target: str) -> dict[str, Any]:
        """The policy in force for dataset `target` and every stored version before it."""
        from runwright.govern import data_contract as contract

        dataset_id = self._dataset_id(target)
        version = contract.current(self.store, dataset_id, root=self.root)
        return {
            "current": version.model_dump(mode="json"),
            "who_can_change": who_can_change(version.policy),
            "history": [v.model_dump(mode="json") for v in self.store.policies.history(dataset_id)],
        }

    def dataset_policy_set(
        self, target: str, changes: dict[str, Any], reason: str | None = None
    ) -> dict[str, Any]:
        """A new policy version: the one in force with `changes` (field -> value, None clears)."""
        from runwright.govern import data_contract as contract

        dataset_id = self._dataset_id(target)
        version = contract.current(self.store, dataset_id, root=self.root)
        self._require_owner(version, "dataset.policy", changes=sorted(changes))
        if version.standing is Standing.DELETED:
            raise RunwrightError(
                f"dataset {dataset_id[:16]} is deleted: its policy is its tombstone and cannot "
                "change"
            )
        try:
            policy = UsePolicy.model_validate(version.policy.model_dump() | changes)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise RunwrightError(
                f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}; nothing was changed"
            ) from None
        written = self._append(version, version.standing, policy, reason, "dataset.policy")
        return written.model_dump(mode="json")

    def dataset_withdraw(self, target: str, reason: str) -> dict[str, Any]:
        """Withdraw dataset `target`: no new run may use it, running ones are alerted and follow
        their `usage.on_withdrawal`, release gates refuse checkpoints that consumed it. The
        answer lists every run, checkpoint and release it reaches (the lineage query)."""
        from runwright.govern import data_contract as contract

        dataset_id = self._dataset_id(target)
        version = contract.current(self.store, dataset_id, root=self.root)
        self._require_owner(version, "dataset.withdraw")
        if version.standing is Standing.ACTIVE:
            version = self._append(
                version, Standing.WITHDRAWN, version.policy, reason, "dataset.withdraw"
            )
        return {
            "policy": version.model_dump(mode="json"),
            "lineage": contract.reach(self.store, dataset_id).model_dump(mode="json"),
        }

    def dataset_delete(
        self, target: str, reason: str, cache_dirs: list[Path] | None = None
    ) -> dict[str, Any]:
        """Delete dataset `target`: a tombstone version first (who, when, why; withdrawn from
        every use), then its folder and cached copies removed. Run again, it removes whatever
        copies are left without a new version."""
        from runwright.govern import data_contract as contract

        dataset_id = self._dataset_id(target)
        version = contract.current(self.store, dataset_id, root=self.root)
        self._require_owner(version, "dataset.delete")
        if version.standing is not Standing.DELETED:
            version = self._append(
                version, Standing.DELETED, version.policy, reason, "dataset.delete"
            )
        removed = contract.remove_copies(self.root, dataset_id, list(cache_dirs or []))
        return {"tombstone": version.model_dump(mode="json"), "removed": removed}

    def check_use(self, spec: "JobSpec", workdir: Path, project: str, params: dict) -> None:
        """Refuse (audited, `denied`) a run the policies of its datasets forbid."""
        from runwright.govern.data_contract import use_refusals

        found = use_refusals(self.store, spec, workdir, project, self.root)
        if found:
            error = PolicyRefused("; ".join(r.message() for r in found))
            raise self.refuse(
                error,
                "run.submit",
                project=project,
                parameters={
                    **params,
                    "refused_by": [{"dataset_id": r.dataset_id, "field": r.field} for r in found],
                },
            )

    def _dataset_id(self, target: str) -> str:
        """The dataset `target` names; through the server, one granted to the actor's project
        (another is "not found", as for `data inspect`)."""
        from runwright.govern.data_contract import resolve

        dataset_id = resolve(self.store, self.root, target)
        project = self.actor.project
        if (
            project is not None
            and not self.actor.site_admin
            and not self.identity.dataset_granted(project, dataset_id)
        ):
            raise NotFoundError(f"no dataset {target[:80]} in project {project}")
        return dataset_id

    def _require_owner(self, version: PolicyVersion, action: str, **parameters: Any) -> None:
        owner = version.policy.owner
        if self.actor.site_admin or (owner is not None and self.actor.name == owner):
            return
        raise self.refuse(
            AccessDenied(
                f"{self.actor.name} may not change dataset {version.dataset_id[:16]}'s policy: "
                f"{who_can_change(version.policy)} can"
            ),
            action,
            target=f"dataset:{version.dataset_id}",
            parameters=parameters,
        )

    def _append(
        self,
        seen: PolicyVersion,
        standing: Standing,
        policy: UsePolicy,
        reason: str | None,
        action: str,
    ) -> PolicyVersion:
        audit = self.audit(
            action,
            target=f"dataset:{seen.dataset_id}",
            parameters={"version": seen.version + 1, "standing": standing.value},
            detail=reason,
        )
        written = self.store.policies.append(
            seen.dataset_id,
            expected_version=seen.version,
            standing=standing,
            policy=policy,
            reason=reason,
            changed_by=self.actor.name,
            audit=audit,
        )
        if written is None:
            raise RunwrightError(
                f"dataset {seen.dataset_id[:16]}'s policy changed while this change was made "
                f"(version {seen.version + 1} exists): look at it again "
                "(`runwright data policy`) and repeat the change if it still applies"
            )
        return written
