"""JSON as RFC 8259 has it, for text a client or a model sends the fleet.

Python's `json.loads` reads more than JSON: `NaN`, `Infinity` and `-Infinity`, and a number past the largest
float (`1e999`) as an infinity. None of them can be written back (Starlette's encoder refuses them, so echoing one
was a 500), nor read by the worker's or the chat template's strict parsers. And an integer longer than Python's
bound on parsed digits (4300) raises a plain `ValueError`, which callers catching `JSONDecodeError` let through.
`loads` refuses all of them as one `NotJson` with the reason, so every reader of outside JSON has one guard.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any


class NotJson(ValueError):
    """Text that is not JSON, or holds a number JSON cannot carry; the message says which and where it can."""


def _constant(name: str) -> float:
    raise NotJson(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJson(f"the number {text[:40]} is out of range (past the largest finite float)")
    return value


def loads(text: str | bytes) -> Any:
    """`text` parsed as strict JSON; `NotJson` else (a `RecursionError` of a deep text is the caller's to bound)."""
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_finite)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NotJson(str(exc)) from None
    except NotJson:
        raise
    except ValueError:  # the only other one: an integer past Python's bound on the digits it parses
        raise NotJson(f"it holds an integer of more than {sys.get_int_max_str_digits()} digits") from None
