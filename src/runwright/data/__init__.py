"""runwright's data plane: content-addressed datasets, a build pipeline, and a deterministic,
resumable mixture/packing loader usable in any PyTorch script.

Never imports the control plane, the store, the CLI or the server.

    from runwright.data import DataLoader, read_manifest
    loader = DataLoader(path, spec.data, global_batch_samples=64, dp_rank=rank, dp_size=world)
    for batch in loader:            # batch.tokens, .labels, .loss_mask, .position_ids, ...
        ...
        state = loader.state_dict()  # commit with the optimizer step

Every name below is imported on first use (runwright/lazy.py): the loader and the builder need
torch, and what only reads a manifest must not pay for it.
"""

from runwright.lazy import lazy_exports

_HOME = {
    "Batch": "read.batch",
    "BuildError": "errors",
    "BuildResult": "builder.pipeline",
    "ConsumptionLedger": "read.ledger",
    "CursorMismatchError": "errors",
    "DataCursor": "read.cursor",
    "DataError": "errors",
    "DataLoader": "read.loader",
    "DatasetManifest": "format.manifest",
    "ExportResult": "builder.megatron",
    "ImportResult": "builder.megatron",
    "IndexedWriter": "format.indexed_shard",
    "OpenDataset": "format.dataset",
    "LedgerRange": "read.ledger",
    "LoaderStats": "read.batch",
    "MIXTURES": "read.mixture",
    "ManifestError": "errors",
    "PACKERS": "read.packing",
    "PackerResidual": "read.cursor",
    "Recipe": "builder.recipe",
    "RecipeError": "errors",
    "SHUFFLES": "read.shuffle",
    "ShardCorruptError": "errors",
    "SourceExhaustedError": "errors",
    "UnknownAlgorithmError": "errors",
    "VerifyReport": "format.report",
    "build_dataset": "builder.pipeline",
    "describe_dataset": "format.report",
    "export_megatron": "builder.megatron",
    "gaps_and_overlaps": "read.ledger",
    "import_megatron": "builder.megatron",
    "join": "read.ledger",
    "load_recipe": "builder.recipe",
    "mixture_sequence": "read.mixture",
    "open_dataset": "format.dataset",
    "open_shard": "format.indexed_shard",
    "pack_documents": "read.rows",
    "read_manifest": "format.manifest",
    "verify_dataset": "format.report",
    "write_pretokenized": "format.pretokenized",
}
"""public name -> the submodule of runwright.data that defines it."""

__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_exports(__name__, _HOME)
