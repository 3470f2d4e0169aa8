"""The base of every planner record: frozen, unknown keys rejected, one docstring per field."""

from pydantic import BaseModel, ConfigDict

GIB = 2**30
"""Bytes in one GiB, the unit the human tables print memory in."""


class Record(BaseModel):
    """A frozen result or input of a planning formula; `model_dump()` is its `--json` form."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
        allow_inf_nan=False,
    )
