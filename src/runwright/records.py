"""The one pydantic base of runwright's records.

Every record (spec sections, store rows, checkpoint manifests, reports, protocol messages) is
frozen and rejects unknown fields, and takes each field's description from the docstring under
it, so `model_json_schema()` and the user's validation errors say what each field means. This
module imports nothing of runwright, so every layer may build on it.
"""

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Frozen, `extra="forbid"`, field docstrings as descriptions (STYLE.md, point 2)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, defer_build=True
    )
