"""The base of every planner record: frozen, unknown keys rejected, one docstring per field."""

from pydantic import ConfigDict

from runwright.records import Record as BaseRecord

GIB = 2**30
"""Bytes in one GiB, the unit the human tables print memory in."""


class Record(BaseRecord):
    """A frozen result or input of a planning formula; `model_dump()` is its `--json` form. No
    number may be inf or NaN: a formula that produced one has a bug."""

    model_config = ConfigDict(allow_inf_nan=False)
