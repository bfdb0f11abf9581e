"""Arrow's compute kernels, called by name, without importing ``pyarrow.compute``. Pure.

Importing ``pyarrow.compute`` builds a Python wrapper, a signature and a numpydoc docstring
for each of Arrow's kernels (with ``pydoc`` and a vendored docstring parser), CPU spent before
a compaction's first worker starts (see docs/performance.md). The kernels themselves live in
``pyarrow._compute``, which those wrappers call through
``call_function``; here the kernels the compaction uses get a plain function each, calling
them the same way. pyarrow's own methods that import ``pyarrow.compute`` on first use
(``Array.cast``, ``filter``, ``take``, ``drop_null``, ``is_null``, ``is_valid``, ``sum``...)
are avoided on the compaction's path for the same reason: a test checks that a compaction
never imports it (``tests/e2e/test_startup.py``).

A kernel called without options runs with its defaults, as through the wrappers: ``min_max``,
``max`` and ``sum`` skip nulls, ``filter`` drops the rows whose selection is null, ``take``
checks bounds, integer ``add``/``subtract``/``multiply`` wrap on overflow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyarrow._compute import (
    CastOptions,
    ScatterOptions,
    SearchSortedOptions,
    StructFieldOptions,
    call_function,
)

__all__ = (
    "add",
    "any",
    "binary_length",
    "cast",
    "ceil",
    "divide",
    "drop_null",
    "equal",
    "filter",
    "is_nan",
    "is_null",
    "is_valid",
    "log2",
    "max",
    "max_element_wise",
    "min_element_wise",
    "min_max",
    "multiply",
    "pairwise_diff",
    "remainder",
    "scatter",
    "search_sorted",
    "struct_field",
    "subtract",
    "sum",
    "take",
    "unique",
    "value_counts",
)
__pure__ = True


def _kernel(name: str) -> Callable[..., Any]:
    """The kernel ``name`` with its default options, applied to positional arguments (arrays,
    chunked arrays, record batches, scalars)."""

    def run(*args: Any) -> Any:
        return call_function(name, list(args))

    run.__name__ = run.__qualname__ = name
    return run


add = _kernel("add")
any = _kernel("any")
binary_length = _kernel("binary_length")
ceil = _kernel("ceil")
divide = _kernel("divide")
drop_null = _kernel("drop_null")
equal = _kernel("equal")
filter = _kernel("filter")
is_nan = _kernel("is_nan")
is_null = _kernel("is_null")
is_valid = _kernel("is_valid")
log2 = _kernel("log2")
max = _kernel("max")
max_element_wise = _kernel("max_element_wise")
min_element_wise = _kernel("min_element_wise")
min_max = _kernel("min_max")
multiply = _kernel("multiply")
pairwise_diff = _kernel("pairwise_diff")
remainder = _kernel("remainder")
subtract = _kernel("subtract")
sum = _kernel("sum")
take = _kernel("take")
unique = _kernel("unique")
value_counts = _kernel("value_counts")


def cast(values: Any, target: Any, *, safe: bool = True) -> Any:
    """``values`` as type ``target``; ``safe`` raises on overflow and truncation."""
    options = CastOptions.safe(target) if safe else CastOptions.unsafe(target)
    return call_function("cast", [values], options)


def struct_field(values: Any, index: int | str) -> Any:
    """Child ``index`` of a struct array, the parent's nulls folded into its validity."""
    return call_function("struct_field", [values], StructFieldOptions([index]))


def search_sorted(values: Any, needles: Any, *, side: str = "left") -> Any:
    """Where each needle would be inserted into the sorted ``values``."""
    return call_function("search_sorted", [values, needles], SearchSortedOptions(side=side))


def scatter(values: Any, indices: Any, *, max_index: int) -> Any:
    """An array of ``max_index + 1`` slots, ``values[i]`` at ``indices[i]``, null elsewhere."""
    return call_function("scatter", [values, indices], ScatterOptions(max_index=max_index))
