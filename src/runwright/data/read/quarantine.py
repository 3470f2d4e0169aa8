"""`data.on_corrupt_shard`: what the loader does about a train shard that is corrupt or missing.

Found where:
- at open: `open_dataset` verifies every shard (by digest, or sizes and index structure);
- while the run reads: the loader holds the shards memory-mapped, so a file rewritten in place
  would hand the model whatever bytes are there now. `ShardWatch` therefore compares the token
  file of every shard a batch read with its identity when it was verified (device, inode, size,
  mtime in ns) as the batch is handed out, after its bytes were copied: a removed, replaced,
  truncated or rewritten file shows, and a shard whose file changed is re-hashed against the
  manifest before it is judged (a `touch` is no corruption). The index was read into memory at
  open; a damaged one shows at the next open. The check is on the caller's thread, at the
  hand-out, so a batch read before a change and handed out after it is still caught, and where
  the change shows does not depend on how far the read workers ran ahead. A change that keeps
  size and mtime (bit rot under the file system) is not seen until the next open; a file
  truncated under a live memory map can end the reading process (SIGBUS) before any check, and
  the restart then finds the shard at open.

What follows, per the policy:
- `fail` (the default): ShardCorruptError naming the shard and what is wrong, failure class
  `data`; no rank goes on with the shard.
- `skip`: every rank brings what it found to the agreement (data/read/agreement.py) and all
  quarantine the same shards at the same step: each becomes a `QuarantinedShard` in the data
  cursor, the dataset folder is never touched (it is immutable and content-addressed; the
  quarantine is evidence of this run), and the planner leaves its documents out from that step
  on (data/read/step_plan.py). The batch that carried the finding is planned again without the
  shard, so no byte of it reaches the model after the decision.

Restarts: the cursor committed with a checkpoint carries the quarantine, so a restart from a
checkpoint taken after it skips the same documents whatever the file holds now (restored or
not). A restart from a checkpoint taken before it re-reads the steps in between; the bytes those
steps read first are gone, so it cannot repeat them: it finds the shard at open and quarantines
it from its first step, and the steps the earlier generation trained past the checkpoint are
discarded with it. If the shard was restored meanwhile, it is read again, as it should be.

An operator's skip (`runwright skip-shard`, control/operator.py) is a decision, not a finding:
the loader is given the shard names (protocol.ENV_SKIP_SHARDS, the same on every rank of every
later generation), and they are quarantined with reason `operator` at the first decision point
(the step the loader starts at) under either policy, with no agreement needed.
"""

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from runwright.data.errors import ShardCorruptError
from runwright.data.format.dataset import FileIdentity, OpenDataset, check_shard, file_identity
from runwright.data.format.manifest import ShardRecord
from runwright.data.read.agreement import ShardAgreement
from runwright.data.read.cursor import DataCursor, QuarantinedShard
from runwright.data.read.step_plan import Exclusion
from runwright.data.read.stream import BLOCK_DOCS, SourceTable
from runwright.events import EventType, emit

Policy = Literal["fail", "skip"]
Reason = Literal["corrupt", "missing", "operator"]
_log = logging.getLogger("runwright.data")


def reason_of(problems: list[str]) -> Reason:
    """`missing` when a file of the shard is gone, else `corrupt`."""
    return "missing" if any(p.endswith(": missing") for p in problems) else "corrupt"


class ShardWatch:
    """Notices the files of a rank's shards changing under it, and re-verifies the ones that
    did. `records` are the train shards in ShardTable order."""

    def __init__(
        self,
        folder: Path,
        records: list[ShardRecord],
        identities: dict[str, tuple[FileIdentity | None, FileIdentity | None]],
    ) -> None:
        self.folder = folder
        self.records = records
        # The .bin only: the index was read into memory at open and is not read again (a
        # damaged one shows at the next open), and a stat per file per step is the cost here.
        self._known = [(identities.get(r.name) or (None, None))[0] for r in records]
        # Path strings made once: building a Path per check costs more than the stat itself.
        self._paths = [str(folder / f"{r.name}.bin") for r in records]
        self._bad: dict[int, list[str]] = {}

    def check(self, indices: Iterable[int]) -> dict[int, list[str]]:
        """Problems of each shard among `indices` that changed and no longer verifies (a shard
        found bad stays bad: it is not re-hashed again)."""
        found: dict[int, list[str]] = {}
        for i in indices:
            if i in self._bad:
                found[i] = self._bad[i]
                continue
            now = file_identity(self._paths[i])
            if now == self._known[i]:
                continue
            # Taken before the re-hash: a write during it shows at the next check.
            problems, _ = check_shard(self.folder, self.records[i], "digest")
            if problems:
                self._bad[i] = found[i] = problems
            else:
                self._known[i] = now
        return found


class ShardGuard:
    """A loader's side of the policy over its train shards (`records`, in ShardTable order, and
    their source `tables` with lengths as read): findings in, decisions (or ShardCorruptError)
    out, and the cursor, stream tables and planner exclusion that follow from a quarantine.

    `dataset.broken` are the shards that failed verification at open (only under `skip`: under
    `fail` opening raised). `group` is the agreement's process group (ShardAgreement).
    """

    def __init__(
        self,
        policy: Policy,
        dataset: OpenDataset,
        records: list[ShardRecord],
        tables: list[SourceTable],
        dp_rank: int,
        dp_size: int,
        group: Any = None,
        operator: dict[str, str] | None = None,
    ) -> None:
        self.policy = policy
        self.dataset_id = dataset.manifest.dataset_id
        self.records = records
        self.tables = tables
        self.dp_rank = dp_rank
        self.watch = ShardWatch(dataset.folder, records, dataset.identities)
        self._index = {r.name: i for i, r in enumerate(records)}
        self.findings: dict[int, list[str]] = {self._index[n]: p for n, p in dataset.broken.items()}
        self._unread = set(self.findings)
        self.operator = {
            self._index[n]: why for n, why in (operator or {}).items() if n in self._index
        }
        """Shard index -> the operator's reason: skipped by decision (module doc)."""
        self._agreement = ShardAgreement(len(records), group) if policy == "skip" else None
        if self._agreement is not None and dp_size > 1 and not self._agreement.active:
            _log.warning(
                "data.on_corrupt_shard is skip with %d data-parallel ranks but no process group "
                "to agree over: each rank decides alone, and ranks that see a shard differently "
                "will read different data. Initialise torch.distributed before the loader",
                dp_size,
            )

    def restored(self, cursor: DataCursor) -> DataCursor:
        """A restored cursor, its records marked estimated where this rank cannot read the
        shard's index (its lost tokens count the manifest's mean from here on)."""
        if not any(self._index.get(q.shard) in self._unread for q in cursor.quarantined):
            return cursor
        marked = tuple(
            q.model_copy(update={"tokens_estimated": True})
            if self._index.get(q.shard) in self._unread
            else q
            for q in cursor.quarantined
        )
        return cursor.model_copy(update={"quarantined": marked})

    def quarantined(self, cursor: DataCursor) -> set[int]:
        """Indices of `cursor`'s quarantined shards that are in this dataset."""
        return {self._index[q.shard] for q in cursor.quarantined if q.shard in self._index}

    def decide(self, read: Iterable[int], done: set[int]) -> dict[int, Reason]:
        """Check the shards a batch `read` (none before planning) and decide: shard index ->
        reason for each shard to quarantine now (`done`: those quarantined already). Under
        `fail` a finding raises instead. Under `skip` every rank must call this at the same
        points (it may all-reduce)."""
        asked: dict[int, Reason] = {i: "operator" for i in self.operator if i not in done}
        done = done | set(asked)
        self.findings.update(self.watch.check(i for i in read if i not in done))
        new = {i: p for i, p in self.findings.items() if i not in done}
        if self.policy == "fail":
            if new:
                i, problems = min(new.items())
                raise ShardCorruptError(
                    f"shard {self.records[i].name} of dataset {self.dataset_id[:12]} changed "
                    f"while the run read it: {'; '.join(problems)}. data.on_corrupt_shard is "
                    "`fail`: restore the shard (`runwright data verify` on the dataset says "
                    "what is wrong) and resume, or set data.on_corrupt_shard: skip to "
                    "quarantine it and train on without it"
                )
            return asked
        assert self._agreement is not None
        return {**self._agreement.agree({i: reason_of(p) for i, p in new.items()}), **asked}

    def apply(
        self, cursor: DataCursor, decided: dict[int, Reason], residual: tuple[int, int] | None
    ) -> DataCursor:
        """`cursor` with the `decided` shards quarantined from its step on, reported (a log
        line on every rank, DATA_SHARD_QUARANTINED from data-parallel rank 0). `residual` is
        the (source, document) of the cursor's residual: cut by the step boundary, it is
        dropped with its shard, and the rest of it is lost."""
        added = [
            QuarantinedShard(
                shard=self.records[i].name,
                source=self.records[i].source,
                reason=reason,
                from_step=cursor.step,
                tokens_estimated=i in self._unread,
            )
            for i, reason in sorted(decided.items())
        ]
        update: dict[str, Any] = {}
        if cursor.residual is not None and residual is not None:
            source, doc = residual
            shard = int(self.tables[source].shard[doc])
            if shard in decided:
                rest = int(self.tables[source].lengths[doc]) - cursor.residual.token_offset
                name = self.records[shard].name
                added = [
                    q.model_copy(update={"tokens_lost": max(0, rest)}) if q.shard == name else q
                    for q in added
                ]
                update["residual"] = None
        for q in added:
            self._report(q)
        return cursor.model_copy(update={**update, "quarantined": (*cursor.quarantined, *added)})

    def _report(self, q: QuarantinedShard) -> None:
        i = self._index[q.shard]
        if i in self.operator and q.reason == "operator":
            self.findings[i] = [f"skipped by an operator: {self.operator[i]}"]
        if i not in self.findings:
            # Another rank found it: say what this rank's copy shows (on a shared folder, the
            # same damage), so the event names the problem whichever rank saw it first.
            self.findings[i] = check_shard(self.watch.folder, self.records[i], "digest")[0] or [
                "found by another rank; this rank's copy verifies"
            ]
        problems = self.findings[i]
        _log.warning(
            "quarantined shard %s (%s: %s): its documents are skipped from step %d on",
            q.shard, q.reason, "; ".join(problems), q.from_step + 1,
        )  # fmt: skip
        if self.dp_rank == 0:
            emit(
                EventType.DATA_SHARD_QUARANTINED,
                key=f"quarantine-{q.shard}-{q.from_step}",
                step=q.from_step + 1,
                dataset_id=self.dataset_id,
                shard=q.shard,
                source=q.source,
                reason=q.reason,
                problems=problems,
                from_step=q.from_step,
                shard_documents=self.records[i].documents,
                shard_tokens=self.records[i].tokens,
                tokens_lost=q.tokens_lost,
            )

    def stream_tables(self, cursor: DataCursor) -> list[SourceTable]:
        """The source tables the stream draws from: a quarantined shard's documents get its
        mean length from the manifest. The mixture's token units look at lengths ahead of
        choosing, and a restart may no longer read the shard's index; the manifest's figure is
        the same for every rank and every restart, so the draws stay the same."""
        quarantined = sorted(self.quarantined(cursor))
        if not quarantined:
            return self.tables
        mean = np.zeros(len(self.records), dtype=np.int64)
        for i in quarantined:
            mean[i] = self.records[i].tokens // max(1, self.records[i].documents)
        out = []
        for t in self.tables:
            hit = np.isin(t.shard, quarantined)
            lengths = np.where(hit, mean[t.shard], t.lengths) if hit.any() else t.lengths
            out.append(SourceTable(t.name, lengths, t.shard, t.offset, t.weight, t.exhaustion))
        return out

    def exclusion(self, cursor: DataCursor) -> Exclusion | None:
        """What the planner leaves out for `cursor`'s quarantined shards, counting each skipped
        document at its length as read (or its shard's mean, where it could not be read)."""
        if not cursor.quarantined:
            return None
        slot = np.full(len(self.records), -1, dtype=np.int64)
        for k, q in enumerate(cursor.quarantined):
            if q.shard in self._index:
                slot[self._index[q.shard]] = k
        return Exclusion(
            slot=slot,
            lost_lengths=[t.lengths for t in self.tables],
            stop_after_draws=sum(t.documents for t in self.tables) + BLOCK_DOCS,
        )
