"""runwright's data plane: content-addressed datasets, a build pipeline, and a deterministic,
resumable mixture/packing loader usable in any PyTorch script.

Never imports the control plane, the store, the CLI or the server.

    from runwright.data import DataLoader, read_manifest
    loader = DataLoader(path, spec.data, global_batch_samples=64, dp_rank=rank, dp_size=world)
    for batch in loader:            # batch.tokens, .labels, .loss_mask, .position_ids, ...
        ...
        state = loader.state_dict()  # commit with the optimizer step
"""

from runwright.data.builder.megatron import (
    ExportResult,
    ImportResult,
    export_megatron,
    import_megatron,
)
from runwright.data.builder.pipeline import BuildResult, build_dataset
from runwright.data.builder.recipe import Recipe, load_recipe
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
from runwright.data.format.indexed_shard import IndexedWriter, open_shard
from runwright.data.format.manifest import DatasetManifest, read_manifest
from runwright.data.format.pretokenized import write_pretokenized
from runwright.data.format.report import VerifyReport, describe_dataset, verify_dataset
from runwright.data.read.batch import Batch, LoaderStats
from runwright.data.read.cursor import DataCursor, PackerResidual
from runwright.data.read.ledger import ConsumptionLedger, LedgerRange, gaps_and_overlaps, join
from runwright.data.read.loader import DataLoader
from runwright.data.read.mixture import MIXTURES, mixture_sequence
from runwright.data.read.packing import PACKERS
from runwright.data.read.rows import pack_documents
from runwright.data.read.shuffle import SHUFFLES

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
