"""Attribute filters of OpenAI's file_search: a comparison (eq, ne, gt, gte, lt, lte) on one attribute of a
file, or a compound (and, or) of filters. A comparison on an attribute the file lacks does not match (ne too)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Scalar = str | float | bool
ORDERED: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["eq", "ne", "gt", "gte", "lt", "lte"]
    key: str
    value: Scalar

    def matches(self, attributes: Mapping[str, Scalar]) -> bool:
        if self.key not in attributes:
            return False
        have = attributes[self.key]
        if self.type == "eq":
            return bool(have == self.value)
        if self.type == "ne":
            return bool(have != self.value)
        if (
            isinstance(have, bool)
            or isinstance(self.value, bool)
            or isinstance(have, str) != isinstance(self.value, str)
        ):
            return False  # an order between a string and a number (or a boolean) does not exist
        return ORDERED[self.type](have, self.value)


class Compound(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["and", "or"]
    filters: list[Filter] = Field(min_length=1)

    def matches(self, attributes: Mapping[str, Scalar]) -> bool:
        results = (f.matches(attributes) for f in self.filters)
        return all(results) if self.type == "and" else any(results)


Filter = Annotated[Comparison | Compound, Field(discriminator="type")]
Compound.model_rebuild()
