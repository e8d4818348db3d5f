"""The package's fixtures, defined in `stack.py` (imported by the tests too, so defined in one module only)."""

from tests.console.stack import browser, fleet

__all__ = ["browser", "fleet"]
