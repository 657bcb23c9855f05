"""Operators are found through the `evo.operators` entry points: evo's own three like any other package's."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

import operators
from tests.fixtures import plugins


def _package(root, name, lines):
    """The installed metadata of a pretend package registering `lines` in the evo.operators group."""
    info = root / f"{name}-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[evo.operators]\n" + "\n".join(lines) + "\n")
    return root


def test_builtins_are_registered_as_entry_points():
    declared = {ep.name: ep.value for ep in entry_points(group=operators.GROUP)}
    assert {"gemm", "softmax", "rmsnorm"} <= set(declared)
    assert declared["gemm"] == "operators.gemm:GemmOperator"
    assert {"gemm", "softmax", "rmsnorm"} <= set(operators.names())
    assert operators.get("softmax").name == "softmax"


def test_a_separate_package_adds_an_operator(monkeypatch):
    assert "toy" not in operators.names()
    plugins.use(monkeypatch)
    assert "toy" in operators.names()
    toy = operators.get("toy", {"BLOCK": [64]})
    assert toy.name == "toy" and toy.family.genes["BLOCK"].values == (64,)


def test_unknown_duplicate_and_wrong_registrations(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="unknown operator 'nope'; known operators: .*gemm"):
        operators.get("nope")
    monkeypatch.syspath_prepend(str(_package(tmp_path / "a", "bad_ops", [
        "misnamed = tests.fixtures.toy_operator:ToyOperator", "notop = builtins:str"])))
    with pytest.raises(ValueError, match="does not make an Operator named 'misnamed'"):
        operators.get("misnamed")
    with pytest.raises(ValueError, match="does not make an Operator"):
        operators.get("notop")
    clash = _package(tmp_path / "b", "clash_ops", ["gemm = tests.fixtures.toy_operator:ToyOperator"])
    monkeypatch.syspath_prepend(str(clash))
    with pytest.raises(ValueError, match="registered twice"):
        operators.names()
