from decimal import Decimal

import pytest

from gangplugin.core.errors import InputError
from gangplugin.core.resources import canonical, format_quantity, parse_quantity, parse_resources


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("500m", Decimal("0.5")),
        ("100n", Decimal("1e-7")),
        ("3u", Decimal("3e-6")),
        ("2k", Decimal(2000)),
        ("1M", Decimal(10**6)),
        ("1G", Decimal(10**9)),
        ("1T", Decimal(10**12)),
        ("1P", Decimal(10**15)),
        ("1E", Decimal(10**18)),
        ("1Ki", Decimal(1024)),
        ("1Mi", Decimal(2**20)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("2.5e-3", Decimal("0.0025")),
        (".5", Decimal("0.5")),
        (4, Decimal(4)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text, "f") == value


@pytest.mark.parametrize("bad", ["", "abc", "1x", "1KiB", "m", "1e", "--1", None, True, [1]])
def test_bad_quantity_names_the_field(bad):
    with pytest.raises(InputError) as err:
        parse_quantity(bad, "spec.cpu")
    assert err.value.field == "spec.cpu"


def test_canonical_units_round_up():
    assert canonical("cpu", "250m", "f") == 250
    assert canonical("cpu", "0.5m", "f") == 1
    assert canonical("cpu", "100u", "f") == 1
    assert canonical("cpu", "2", "f") == 2000
    assert canonical("cpu", 2, "f") == 2000
    assert canonical("memory", "1Gi", "f") == 2**30
    assert canonical("memory", "1.5", "f") == 2
    assert canonical("memory", "100m", "f") == 1
    assert canonical("nvidia.com/gpu", "4", "f") == 4
    with pytest.raises(InputError, match="negative"):
        canonical("cpu", "-1", "f")


def test_parse_resources_and_format():
    assert parse_resources({"cpu": "1500m", "memory": "64Gi", "pods": 110}, "r") == {
        "cpu": 1500,
        "memory": 64 * 2**30,
        "pods": 110,
    }
    assert parse_resources(None, "r") == {}
    with pytest.raises(InputError) as err:
        parse_resources({"cpu": "lots"}, "status.allocatable")
    assert err.value.field == "status.allocatable.cpu"
    with pytest.raises(InputError):
        parse_resources(["cpu"], "r")
    assert format_quantity("cpu", 1500) == "1500m"
    assert format_quantity("cpu", 2000) == "2"
    assert format_quantity("memory", 64 * 2**30) == "64Gi"
    assert format_quantity("memory", 1000) == "1000"
    assert format_quantity("nvidia.com/gpu", 4) == "4"
