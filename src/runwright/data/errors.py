"""Errors of the data plane; each names the dataset, shard or field and says what to change."""

from runwright.errors import RunwrightError


class DataError(RunwrightError):
    """Base of every data-plane error."""


class RecipeError(DataError):
    """A build recipe is malformed or names inputs that do not exist."""


class BuildError(DataError):
    """A build could not finish (not a bad record: those are quarantined)."""


class ManifestError(DataError):
    """A dataset folder has no readable manifest, or the manifest does not match its id."""


class ShardCorruptError(DataError):
    """A token shard's bytes or index do not match what the manifest recorded."""


class CursorMismatchError(DataError):
    """A data cursor was written for another dataset, tokenizer, algorithm or layout."""


class SourceExhaustedError(DataError):
    """A mixture source with exhaustion policy `error` ran out within an epoch."""


class UnknownAlgorithmError(DataError):
    """A versioned algorithm name is not registered in this runwright version."""


class DataStorageError(DataError):
    """A dataset's storage could not be read: an object store unreachable or timing out after the
    bounded retries (`runwright.remote`), or the local cache unwritable. Not the data's fault:
    the control plane classifies it as `storage`, and a retry may succeed."""
