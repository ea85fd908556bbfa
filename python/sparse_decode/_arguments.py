"""What the Python layer checks before (or, for arrays, after) a call into the extension.

The extension's functions take arrays through nanobind: an argument that is
not one (None where an array is required, a list, a read-only NumPy array as
an output) fails there with a TypeError that lists the binding's own
parameters. Required arrays and scalars are checked here before the call;
when the call still fails with a TypeError, `call` finds the argument that
caused it and raises a TypeError naming it, so nothing costs time on a call
that goes through.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Collection, Optional

from . import _ext

_INT32_MAX = 2**31 - 1
_ARRAY = "an array (any DLPack array: torch, NumPy, CuPy, ...)"


def require(**arrays: Any) -> None:
    """TypeError naming the first of `arrays` that is None."""
    for name, array in arrays.items():
        if array is None:
            raise TypeError(f"{name}: expected {_ARRAY}, got None")


def integer(value: Any, name: str, *, low: int = 0, high: int = _INT32_MAX) -> int:
    """`value` as an int in [low, high]: TypeError for a non-integer (bool included), ValueError out of range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not low <= int(value) <= high:
        raise ValueError(f"{name}: expected an int in [{low}, {high}], got {int(value)}")
    return int(value)


def optional_integer(value: Any, name: str, *, low: int = 0) -> Optional[int]:
    return None if value is None else integer(value, name, low=low)


def stream(value: Any) -> Optional[int]:
    """A CUDA stream handle (an int), or None for the framework's current stream."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"stream: expected a CUDA stream handle as an int, got {type(value).__name__}")
    return int(value)


def _accepted(value: Any, writable: bool) -> bool:
    try:
        (_ext._is_writable_array if writable else _ext._is_array)(value)
        return True
    except TypeError:
        return False


def _why_not(value: Any, writable: bool) -> str:
    module = type(value).__module__.split(".")[0]
    kind = type(value).__name__ if module == "builtins" else f"{module}.{type(value).__name__}"
    if writable and _accepted(value, False):
        return f"expected a writable array, got a read-only {kind}"
    if hasattr(value, "__dlpack__") or hasattr(value, "__array_interface__"):
        details = []
        for attribute in ("dtype", "device"):
            if hasattr(value, attribute):
                details.append(f"{attribute} {getattr(value, attribute)}")
        return f"expected {_ARRAY} the extension can import, got a {kind}" + (
            f" ({', '.join(details)})" if details else ""
        )
    return f"expected {_ARRAY}, got {kind}"


def diagnose(arguments: dict, outputs: Collection[str]) -> None:
    """TypeError naming the first array argument that does not convert (None and numbers are skipped: the
    callers pass every other argument as an array)."""
    for name, value in arguments.items():
        if value is None or isinstance(value, numbers.Number):
            continue
        writable = name in outputs
        if not _accepted(value, writable):
            raise TypeError(f"{name}: {_why_not(value, writable)}")


def call(function: Callable[..., Any], arguments: dict, outputs: Collection[str]) -> Any:
    """function(**arguments); a TypeError from the binding is raised again naming the argument that caused it."""
    try:
        return function(**arguments)
    except TypeError:
        diagnose(arguments, outputs)
        raise
