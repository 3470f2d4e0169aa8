"""runwright's data plane: content-addressed datasets, a build pipeline, and a deterministic,
resumable mixture/packing loader usable in any PyTorch script.

Never imports the control plane, the store, the CLI or the server.

    from runwright.data import DataLoader, read_manifest
    loader = DataLoader(path, spec.data, global_batch_samples=64, dp_rank=rank, dp_size=world)
    for batch in loader:            # batch.tokens, .labels, .loss_mask, .position_ids, ...
        ...
        state = loader.state_dict()  # commit with the optimizer step
"""

from runwright.data.batch import Batch, LoaderStats
from runwright.data.build import BuildResult, build_dataset
from runwright.data.cursor import DataCursor, PackerResidual
from runwright.data.errors import (
    BuildError,
    CursorMismatchError,
    DataError,
    ManifestError,
    RecipeError,
    ShardCorruptError,
    SourceExhaustedError,
    UnknownAlgorithmError,
)
from runwright.data.indexed import IndexedWriter, open_shard
from runwright.data.ledger import ConsumptionLedger, LedgerRange, gaps_and_overlaps, join
from runwright.data.loader import DataLoader
from runwright.data.manifest import DatasetManifest, read_manifest
from runwright.data.megatron import ExportResult, ImportResult, export_megatron, import_megatron
from runwright.data.mixture import MIXTURES, mixture_sequence
from runwright.data.packing import PACKERS
from runwright.data.permute import SHUFFLES
from runwright.data.pretokenized import write_pretokenized
from runwright.data.recipe import Recipe, load_recipe
from runwright.data.report import VerifyReport, describe_dataset, verify_dataset
from runwright.data.rows import pack_documents

__all__ = [
    "MIXTURES",
    "PACKERS",
    "SHUFFLES",
    "Batch",
    "BuildError",
    "BuildResult",
    "ConsumptionLedger",
    "CursorMismatchError",
    "DataCursor",
    "DataError",
    "DataLoader",
    "DatasetManifest",
    "ExportResult",
    "ImportResult",
    "IndexedWriter",
    "LedgerRange",
    "LoaderStats",
    "ManifestError",
    "PackerResidual",
    "Recipe",
    "RecipeError",
    "ShardCorruptError",
    "SourceExhaustedError",
    "UnknownAlgorithmError",
    "VerifyReport",
    "build_dataset",
    "describe_dataset",
    "export_megatron",
    "gaps_and_overlaps",
    "import_megatron",
    "join",
    "load_recipe",
    "mixture_sequence",
    "open_shard",
    "pack_documents",
    "read_manifest",
    "verify_dataset",
    "write_pretokenized",
]
