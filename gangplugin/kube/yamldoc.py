"""One YAML (or JSON) document from a file, as gangctl and the kubeconfig reader take them, with a
syntax error told as `file:line:column: message` (where an editor jumps to), never PyYAML's
multi-line report."""

from __future__ import annotations

from typing import Any

import yaml

from gangplugin.core.errors import InputError

# libyaml's loader when present: `kubectl get pods -A -o yaml` files run to hundreds of MB.
Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def syntax_error(err: yaml.YAMLError, name: str) -> InputError:
    """`err` as one line: `name:line:column` (1-based, from the mark) and what is wrong there."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return InputError(name, f"not YAML: {str(err).strip().splitlines()[0] if str(err).strip() else err}")
    mark = err.problem_mark
    problem = err.problem or "not YAML"
    if err.context:
        problem += f" ({err.context})"
    return InputError(f"{name}:{mark.line + 1}:{mark.column + 1}", problem)


def load_file(path: str) -> Any:
    """The one document in `path`; InputError naming the file (and line and column) when it is
    not one, OSError when it cannot be read."""
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(path, f"not UTF-8 text (byte {err.start})") from None
    try:
        return yaml.load(text, Loader=Loader)  # a safe loader
    except yaml.YAMLError as err:
        raise syntax_error(err, path) from None
