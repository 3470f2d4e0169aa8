"""Record: the base of every data-plane record (manifest, recipe, cursor, ledger, reports).

Frozen and `extra="forbid"` (STYLE.md: records reject unknown keys), and each field's one-line
docstring is its description, so a validation error names the field and says what it is.
"""

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Frozen, unknown keys rejected, one-line field descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
