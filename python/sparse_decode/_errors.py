"""Refusals as a caller sees them: named by the caller's arguments, raised as the caller's library raises them.

The library's messages start with the field they are about, as the C++
argument structs spell it ("swa.pool.page_stride: expected ..."), and the
binding's with the low-level call's argument ("q: expected ..."). Each entry
point (a package function, a drop-in's argument set) has one table here: the
names it renames and the exception type its upstream raises for a bad
argument. `entry(key)` applies it where a library error becomes the caller's
exception, the one place that does; entries nest (a drop-in around the
package function it calls), each renaming the names the inner one produced.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, Type


class AssertionRefusal(AssertionError, ValueError):
    """A bad argument where the upstream asserts (FlashMLA's Python checks, seed 002): an AssertionError as
    there, and a ValueError as this package raises for bad arguments."""


class CheckRefusal(RuntimeError, ValueError):
    """A bad argument where the upstream's C++ check (TORCH_CHECK) raises RuntimeError: a RuntimeError as
    there, and a ValueError as this package raises for bad arguments."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# "name: ..." or "name (part): ...", name possibly dotted (a C++ struct field).
_HEAD = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.]*)(?: \((?P<part>[^()]*)\))?: ")
# "name[index] = value: ...": an element of an array argument (the converter's refusals).
_ELEMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<element>\[[0-9]+\](?: = [^:]*)?: )")

# Fields of a struct argument, in words (None: the argument itself).
_FIELDS = {
    "data": None,
    "pool": None,
    "device": None,
    "pages": "page count",
    "page_size": "page size",
    "row_stride": "row stride",
    "page_stride": "page stride",
    "indices_stride": "row stride",
    "width": "width",
}

# Stride suffixes of flat field names ("q_token_stride"), in words.
_STRIDES = (
    ("_request_stride", "request stride"),
    ("_token_stride", "token stride"),
    ("_head_stride", "head stride"),
    ("_row_stride", "row stride"),
    ("_slot_stride", "slot stride"),
    ("_group_stride", "group stride"),
    ("_page_stride", "page stride"),
    ("_stride", "row stride"),
)

_NULL = "expected a non-null pointer"

# A stride field named in a message's text ("with a request stride (q_request_stride = 40960)").
_STRIDE_IN_TEXT = re.compile(r"(?<![\w.])[A-Za-z_][\w.]*_(?:request|token|head)_stride(?![\w.])")


class Entry:
    """How one entry point names its refusals: `arguments` are its own argument names (kept), `renames`
    maps other names (library fields, an inner call's arguments) to the caller's, possibly with a part
    ("q (heads)"); `refusal` is the type a bad argument (a ValueError) is raised as."""

    def __init__(self, arguments: Iterable[str], renames: Mapping[str, str], refusal: Type[Exception] = ValueError,
                 *, in_text: bool = False):
        self.arguments = frozenset(arguments)
        self.renames = dict(renames)
        self.refusal = refusal
        # in_text: argument names in the message's text are renamed too ("the same device as q").
        plain = {key: value for key, value in self.renames.items() if _NAME.fullmatch(key) and _NAME.fullmatch(value)}
        self._in_text = (
            re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(plain, key=len, reverse=True))) + r")(?![\w.])")
            if in_text and plain
            else None
        )
        self._plain = plain

    def _name(self, name: str, part: Optional[str]) -> Optional[str]:
        """The caller's spelling of `name` (with `part`), or None when this entry does not know it."""
        if name in self.renames:
            renamed = self.renames[name]
            return renamed if part is None else _with_part(renamed, part)
        if name in self.arguments:
            return name if part is None else f"{name} ({part})"
        if "." in name:
            base, _, field = name.rpartition(".")
            words = _FIELDS.get(field, field.replace("_", " "))
            inner = part if words is None else words if part is None else f"{words}, {part}"
            return self._name(base, inner)
        for suffix, words in _STRIDES:
            if name.endswith(suffix):
                return self._name(name[: -len(suffix)], words if part is None else f"{words}, {part}")
        return None

    def message(self, message: str) -> str:
        match = _HEAD.match(message)
        if not match:
            element = _ELEMENT.match(message)
            renamed = self._name(element["name"], None) if element else None
            if renamed is None or " " in renamed:  # an element of an argument named with a part has no index
                return message
            return renamed + element["element"] + self._text(message[element.end():])
        renamed = self._name(match["name"], match["part"])
        if renamed is None:
            return message
        rest = message[match.end():]
        if rest.startswith(_NULL):  # a missing argument, as Python callers pass one
            rest = "expected an array" + rest[len(_NULL):] + ", got None"
        return f"{renamed}: {self._text(rest)}"

    def _text(self, rest: str) -> str:
        """Stride fields in the message's text named by their argument; argument names renamed (in_text
        entries)."""
        rest = _STRIDE_IN_TEXT.sub(lambda field: self._name(field[0], None) or field[0], rest)
        if self._in_text is None:
            return rest
        return self._in_text.sub(lambda word: self._plain[word[1]], rest)


def _with_part(renamed: str, part: str) -> str:
    if renamed.endswith(")"):
        return f"{renamed[:-1]}, {part})"
    return f"{renamed} ({part})"


_ENTRIES: Dict[str, Entry] = {}


def register(key: str, entry: Entry) -> None:
    _ENTRIES[key] = entry


@contextlib.contextmanager
def entry(key: str) -> Iterator[None]:
    """Within it, a ValueError, TypeError or NotImplementedError is re-raised named as entry `key` names
    it ('' or an unknown key: unchanged), a ValueError as the entry's refusal type."""
    table = _ENTRIES.get(key)
    if table is None:
        yield
        return
    try:
        yield
    except (ValueError, TypeError, NotImplementedError) as error:
        kind = type(error)
        if kind is ValueError:
            kind = table.refusal
        elif kind not in (TypeError, NotImplementedError, AssertionRefusal, CheckRefusal):
            raise  # another library's subclass: not a refusal of ours
        message = table.message(str(error))
        if kind is type(error) and message == str(error):
            raise
        raise kind(message) from None


def named(key: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: the function's refusals named as entry `key` names them."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with entry(key):
                return function(*args, **kwargs)

        return wrapper

    return decorate
