"""The files offline commands read: one YAML or JSON document each, errors naming the file (with
line and column for a syntax error) and the field inside it, as one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gangplugin.core.errors import InputError
from gangplugin.kube.yamldoc import load_file

_T = TypeVar("_T")


def in_file(path: str, err: InputError) -> InputError:
    """`err` (a field inside the document) as a field of the file `path`."""
    return InputError(f"{path}: {err.field}", err.problem)


def load(path: str | None, flag: str) -> Any:
    """The document in the file `flag` names."""
    if not path:
        raise InputError(flag, "is required (a YAML file)")
    try:
        return load_file(path)
    except OSError as err:
        raise InputError(flag, f"cannot read {path}: {err.strerror or err}") from None


def one_object(doc: Any) -> Any:
    """`kubectl get ... -o yaml` wraps objects in a List; one object is what is wanted."""
    if isinstance(doc, dict) and doc.get("kind") == "List":
        items = doc.get("items") or []
        if len(items) != 1:
            raise InputError("items", f"the List holds {len(items)} objects; give a file with one")
        return items[0]
    return doc


def read(path: str | None, flag: str, parse: Callable[[Any], _T]) -> _T:
    """The file parsed by `parse`; its errors name the file and the field."""
    doc = load(path, flag)
    assert path is not None
    try:
        return parse(doc)
    except InputError as err:
        raise in_file(path, err) from None
