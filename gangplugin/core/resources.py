"""Kubernetes resource quantities ("500m", "64Gi", "1e3") as ints in canonical units.

Canonical units: cpu in millicores, every other resource (memory and ephemeral-storage in
bytes, pods, `nvidia.com/gpu`, `vpc.amazonaws.com/efa`, ...) in whole units. Fractions
round up, as Kubernetes does when it takes a quantity's value: "0.5m" cpu is 1 millicore,
"1.5" memory is 2 bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from gangplugin.core.errors import InputError

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
#: The devices gangs are made of: what makes a node taken (not a spare), what a preemption and a
#: reservation cost.
ACCELERATORS = ("nvidia.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore")

#: Decimal suffixes are powers of 1000 in order (k = 10^3 ... E = 10^18), binary ones powers of
#: 1024 (Ki = 2^10 ... Ei = 2^60); m, u and n are the fractions.
_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    **{s: Decimal(10) ** (3 * i) for i, s in enumerate("kMGTPE", 1)},
    **{f"{s}i": Decimal(2) ** (10 * i) for i, s in enumerate("KMGTPE", 1)},
}
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)")


def parse_quantity(value: object, field: str) -> Decimal:
    """The exact value of a quantity string (or YAML number); InputError naming `field` if bad."""
    if isinstance(value, bool):
        raise InputError(field, f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise InputError(field, f"{value!r} is not a quantity; write it like 500m, 64Gi or 4")
    m = _QUANTITY.fullmatch(value.strip())
    if m is None:
        raise InputError(field, f"{value!r} is not a quantity; write it like 500m, 64Gi or 4")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as err:  # pragma: no cover - the regex admits only valid numbers
        raise InputError(field, f"{value!r} is not a quantity") from err
    if m.group(2):
        return number.scaleb(int(m.group(2)[1:]))
    return number * _SUFFIX[m.group(3) or ""]


def _ceil(d: Decimal) -> int:
    i = int(d)  # truncates toward zero
    return i + 1 if d > i else i


def canonical(name: str, value: object, field: str) -> int:
    """`value` of resource `name` in canonical units: millicores for cpu, whole units otherwise."""
    if type(value) is int:
        q: Decimal | int = value
    elif isinstance(value, str) and value.isdigit():
        q = int(value)
    else:
        q = parse_quantity(value, field)
    if q < 0:
        raise InputError(field, f"{value!r} is negative")
    if name == CPU:
        return int(q) * 1000 if isinstance(q, int) else _ceil(q * 1000)
    return q if isinstance(q, int) else _ceil(q)


def parse_resources(values: object, field: str) -> dict[str, int]:
    """A ResourceList mapping (`requests`, `allocatable`, ...) in canonical units."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise InputError(field, "must be a mapping of resource name to quantity")
    return {str(k): canonical(str(k), v, f"{field}.{k}") for k, v in values.items()}


def format_quantity(name: str, amount: int) -> str:
    """A short human form of a canonical amount: "500m", "4", "64Gi"."""
    if name == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if name in (MEMORY, "ephemeral-storage") or name.startswith("hugepages-"):
        for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
            if amount and amount % (1 << power) == 0:
                return f"{amount >> power}{suffix}"
    return str(amount)
