"""What a framework's tool returned, in a form the ledger can keep (shared by the adapters).

A tool's return value is recorded with its call. Frameworks accept more than JSON: Pydantic AI's tools return
pydantic models (its docs' own examples), the OpenAI Agents SDK turns any object into text for the model. The
ledger's encoder refused them *after the tool ran*: the call was recorded ``failed`` (a call whose effect happened,
told to a resume as one that failed) and the agent run broke where the framework alone went on. Now the ledger keeps
the value's JSON form (``pydantic_core.to_jsonable_python``: models, dataclasses, dates), or, for what has none (an
object without a serializer, a generator, a structure nested past any encoder's depth), its text; the live run gets
the very object the tool returned, and a resumed run the recorded form (what the model was shown). Rejected:
recording every value's text (a resumed run would hand a model a dict's repr), and consuming an iterator to record
it (the live run would then get it empty).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import msgspec
from pydantic_core import PydanticSerializationError, to_jsonable_python

__all__ = ["recordable"]

_encoder = msgspec.json.Encoder()
_TEXT_LIMIT = 4096  # an object's text recorded in place of its value: enough to tell the model what it was


def recordable(value: Any) -> tuple[Any, bool]:
    """``(the value the ledger keeps, whether it differs from the live one)``."""
    try:
        _encoder.encode(value)
        return value, False
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
        pass
    if not _iterator(value):
        try:
            plain = to_jsonable_python(value)
            _encoder.encode(plain)
            return plain, True
        except (TypeError, ValueError, OverflowError, RecursionError, PydanticSerializationError, msgspec.EncodeError):
            pass
    try:
        text = str(value)
    except Exception:  # an object whose __str__ raises: named by its type
        text = f"<{type(value).__name__}>"
    return text[:_TEXT_LIMIT], True


def _iterator(value: Any) -> bool:
    """A value that serializing would consume (generators, iterators): recorded as its text, never read."""
    return isinstance(value, Iterator) or inspect.isasyncgen(value) or inspect.iscoroutine(value)
