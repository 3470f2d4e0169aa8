"""Dataset and checkpoint actions: list, inspect and verify for every reader; checkpoint garbage
collection and export for operators, audited.

Through the server a dataset exists for a project only once a site admin granted it
(`runwright data grant`), and a checkpoint only as one of a run of the project: a run id of
another project, or a dataset id not granted, is "not found" like one that does not exist. A CLI
on the store itself also takes checkpoint and dataset folders by path, as it always did."""

import re
from pathlib import Path
from typing import Any

from runwright.access.base import AccessBase
from runwright.access.roles import AccessDenied, Permission
from runwright.errors import NotFoundError, RunwrightError
from runwright.layout import dataset_dir, datasets_dir, runs_dir, validate_run_id

DATASET_ID = re.compile(r"[0-9a-f]{64}")
EXPORTS = "exports"
"""Through the server, exports go to `<root>/exports/<project>/<run>/<name>/`."""


class StorageActions(AccessBase):
    # -- datasets -----------------------------------------------------------------------------

    def datasets(self) -> list[dict[str, Any]]:
        """The datasets the actor's project may read (a CLI on the store: every dataset folder
        under the root), with the name the catalog registered, if any."""
        if self.actor.project is None:
            found = datasets_dir(self.root)
            ids = (
                sorted(p.name for p in found.iterdir() if DATASET_ID.fullmatch(p.name))
                if found.is_dir()
                else []
            )
        else:
            ids = self.identity.datasets(self.actor.project)
        rows = []
        for dataset_id in ids:
            registered = self.store.datasets.get(dataset_id)
            rows.append(
                {
                    "dataset_id": dataset_id,
                    "name": registered.name if registered else None,
                    "present": (dataset_dir(self.root, dataset_id) / "manifest.json").is_file(),
                }
            )
        return rows

    def dataset_folder(self, target: str) -> str:
        """The folder of dataset `target`: an id the actor's project may read (under
        `<root>/datasets/`); a CLI on the store may also name any folder or URL."""
        if self.actor.project is None and not DATASET_ID.fullmatch(target):
            return target
        if not DATASET_ID.fullmatch(target):
            raise RunwrightError(
                f"{target[:80]!r} is not a dataset id (64 hex digits); `runwright data list` "
                "shows the project's datasets"
            )
        if self.actor.project is not None and not self.identity.dataset_granted(
            self.actor.project, target
        ):
            raise NotFoundError(f"no dataset {target} in project {self.actor.project}")
        return str(dataset_dir(self.root, target))

    def dataset_inspect(self, target: str) -> dict[str, Any]:
        from runwright.data.format.report import describe_dataset

        return describe_dataset(self.dataset_folder(target))

    def dataset_verify(self, target: str) -> dict[str, Any]:
        from runwright.data.format.report import verify_dataset

        return verify_dataset(self.dataset_folder(target)).model_dump(mode="json")

    def grant_dataset(self, project: str, dataset_id: str) -> dict[str, Any]:
        audit = self.audit("dataset.grant", project=project, target=f"dataset:{dataset_id[:64]}")
        if not self.actor.site_admin:
            raise self.refuse(
                AccessDenied(
                    f"{self.actor.name} is not a site admin; only a site admin grants datasets"
                ),
                audit.action,
                project=project,
                target=audit.target,
            )
        if not DATASET_ID.fullmatch(dataset_id):
            raise RunwrightError(f"{dataset_id[:80]!r} is not a dataset id (64 hex digits)")
        if not (dataset_dir(self.root, dataset_id) / "manifest.json").is_file():
            raise NotFoundError(f"no dataset {dataset_id} under {datasets_dir(self.root)}")
        self.identity.grant_dataset(project, dataset_id, audit)
        return {"project": project, "dataset_id": dataset_id}

    # -- checkpoints --------------------------------------------------------------------------

    def checkpoint_root(self, target: str, action: str | None = None) -> tuple[str, str | None]:
        """(the checkpoint root, a checkpoint's own folder name or None) of `target`: a run of
        the actor's project; a CLI on the store may also give a folder path or URL."""
        from runwright.ckpt import inventory as inv

        if self.actor.project is None:
            target = self._run_folder_name(target)
            return inv.checkpoint_target(target, self.root if self.root_given else None)
        run = self.run(target, action)
        return inv.checkpoint_root(run.run_id, run.root), None

    def _run_folder_name(self, target: str) -> str:
        """`target` itself, or the one run under the root whose id it is a prefix of (run ids
        may be shortened here as in `status`). Read from `<root>/runs/`, not the store: a
        read-only command on a folder creates no store, and a copied root works as well."""
        try:
            validate_run_id(target)
            if not self.root_given and Path(target).is_dir():
                return target  # a folder here, as checkpoint_target reads it
            runs = runs_dir(self.root)
            if (runs / target).is_dir() or not runs.is_dir():
                return target
            matches = [p.name for p in runs.iterdir() if p.name.startswith(target)]
        except (ValueError, OSError):
            return target  # not a run id: a folder path or URL, judged by checkpoint_target
        if len(matches) > 1:
            raise NotFoundError(
                f"run id prefix {target!r} is ambiguous ({', '.join(sorted(matches)[:3])}, ...); "
                "give more of it"
            )
        return matches[0] if matches else target

    def _audits(self, target: str) -> bool:
        """Whether a checkpoint change on `target` has an audit log to go to: always through
        the server; from a CLI when the target is a run (a folder given by its path belongs to
        no run and no store, and opening one would create it)."""
        if self.actor.project is not None:
            return True
        return not (
            not self.root_given and ("/" in target or "://" in target or Path(target).is_dir())
        )

    def ckpt_list(self, target: str) -> dict[str, Any]:
        from runwright.ckpt import inventory as inv

        folder, _ = self.checkpoint_root(target)
        return inv.inventory(folder).model_dump(mode="json")

    def ckpt_inspect(self, target: str, checkpoint: str = "latest") -> dict[str, Any]:
        from runwright.ckpt import inventory as inv

        folder, own = self.checkpoint_root(target)
        _, found = inv.find(folder, own or _checkpoint_ref(checkpoint))
        return {
            "folder": found.folder,
            "record": found.record.model_dump(mode="json"),
            "manifest": found.manifest.model_dump(mode="json"),
        }

    def ckpt_verify(
        self,
        target: str,
        checkpoint: str | None = None,
        mode: str = "full",
        advance: Any = None,
        total: Any = None,
    ) -> dict[str, Any]:
        from runwright.ckpt import inventory as inv

        folder, own = self.checkpoint_root(target)
        ref = own or (_checkpoint_ref(checkpoint) if checkpoint else None)
        if mode not in ("full", "sampled"):
            raise RunwrightError(f"mode {mode!r} is not a verify mode; use full or sampled")
        report = inv.verify(folder, ref, mode, advance, total)
        return report.model_dump(mode="json") | {"ok": report.ok}

    def ckpt_gc(
        self, target: str, min_age_seconds: float, max_entries: int, dry_run: bool = False
    ) -> dict[str, Any]:
        from runwright.ckpt import inventory as inv

        action = "checkpoint.gc"
        folder, _ = self.checkpoint_root(target, action)
        if dry_run:
            # Reading what a pass would remove changes nothing: no permission, no audit entry.
            return inv.collect(folder, min_age_seconds, max_entries, dry_run=True).model_dump(
                mode="json"
            )
        params = {"min_age_seconds": min_age_seconds, "max_entries": max_entries}
        self.require(
            Permission.MANAGE_CHECKPOINTS,
            "removing checkpoint residue",
            action,
            target=target,
            parameters=params,
        )
        note = self.record if self._audits(target) else _unrecorded
        try:
            report = inv.collect(folder, min_age_seconds, max_entries)
        except RunwrightError as exc:
            note(action, target=target, parameters=params, outcome="failed", detail=str(exc))
            raise
        note(
            action,
            target=target,
            parameters={
                **params,
                "removed": len(report.removed),
                "bytes_freed": report.bytes_freed,
            },
        )
        return report.model_dump(mode="json")

    def ckpt_export(
        self,
        target: str,
        out: str,
        checkpoint: str = "latest",
        model_config: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        format: str = "auto",
        spec: str | None = None,
    ) -> dict[str, Any]:
        """Export for use elsewhere (ckpt/export.py): the model config and tokenizer of a run
        come from its spec and dataset. A CLI on the store writes to `out` as given; through
        the server `out` is a plain name and the export goes under `<root>/exports/`, and no
        file of the caller's (a tokenizer, a spec) can be named: it would be a path on the
        server."""
        from runwright.ckpt import inventory as inv
        from runwright.ckpt.export import ExportFormat
        from runwright.ckpt.export_source import resolve_source

        action = "checkpoint.export"
        folder, own = self.checkpoint_root(target, action)
        params = {"checkpoint": checkpoint, "out": out[:200], "format": format}
        self.require(
            Permission.MANAGE_CHECKPOINTS, "exporting a checkpoint", action, target=target,
            parameters=params,
        )  # fmt: skip
        note = self.record if self._audits(target) else _unrecorded
        try:
            destination = out
            source_target, source_root = target, (self.root if self.root_given else None)
            if self.actor.project is not None:
                validate_run_id(out)  # a plain name, like a run id
                if tokenizer is not None or spec is not None:
                    raise RunwrightError(
                        "--tokenizer and --spec name files on this machine, which the server "
                        "cannot read: export without them, or run the export where they are"
                    )
                run = self.run(target)
                destination = str(Path(self.root) / EXPORTS / run.project / run.run_id / out)
                source_target, source_root = run.run_id, run.root
            source = resolve_source(
                source_target,
                folder,
                source_root,
                spec_path=spec,
                model_config=model_config,
                tokenizer_path=tokenizer,
            )
            release = inv.export(
                folder, own or _checkpoint_ref(checkpoint), destination, source=source,
                format=ExportFormat(format),
            )  # fmt: skip
        except ValueError as exc:
            error = RunwrightError(f"--out {out[:80]!r}: {exc}")
            note(action, target=target, parameters=params, outcome="failed", detail=str(error))
            raise error from None
        except RunwrightError as exc:
            note(action, target=target, parameters=params, outcome="failed", detail=str(exc))
            raise
        note(
            action,
            target=target,
            parameters={**params, "step": release.source_step, "destination": destination},
        )
        return release.model_dump(mode="json") | {"destination": destination}


def _unrecorded(action: str, **fields: Any) -> None:
    """A change with no audit log to go to (see `_audits`)."""


def _checkpoint_ref(ref: str) -> str:
    """A checkpoint named by folder name, id, step or `latest`: a plain name, never a path."""
    try:
        return validate_run_id(ref)
    except ValueError:
        raise RunwrightError(
            f"{ref[:80]!r} is not a checkpoint: give its folder name, id, step or `latest`"
        ) from None
