"""How much of OpenVINO's opsets 1-17 converts, measured against the opset table."""

from __future__ import annotations

import pytest

from b2s_onnx.ir.converters.registry import CONVERTERS, missing_ops
from b2s_onnx.ir.inexpressible import INEXPRESSIBLE, NOT_YET
from b2s_onnx.ir.openvino_opsets import LATEST, STRUCTURAL, all_versions, opset

#: The issue's bound on op types without a converter.
MOST_MISSING = 10


def test_every_op_type_converts_or_says_why_not():
    """Each op type without a converter is inexpressible (with the reason) or a known gap
    (with the reason), and there are at most ten of them."""
    missing = missing_ops()
    explained = set(INEXPRESSIBLE) | set(NOT_YET)
    unexplained = {name: v for name, v in missing.items() if name not in explained}
    listed = ", ".join(f"{name}-{'/'.join(v)}" for name, v in sorted(unexplained.items()))
    print(f"{len(missing)} op type(s) lack a converter; without a reason: {listed or 'none'}")
    assert not unexplained, f"{len(unexplained)} op type(s) neither convert nor say why: {listed}"
    assert len(missing) <= MOST_MISSING


def test_inexpressible_types_are_opset_types_without_a_converter():
    types = all_versions()
    registered = {name.lower() for name, _ in CONVERTERS}
    for reasons in (INEXPRESSIBLE, NOT_YET):
        assert set(reasons) <= set(types)
        assert not {name.lower() for name in reasons} & registered
        assert all(reason.strip() for reason in reasons.values())
    assert not set(INEXPRESSIBLE) & set(NOT_YET)


def test_later_opsets_keep_most_ops_and_structural_ones_are_excluded():
    assert ("Gather", "opset8") in opset(LATEST)
    assert ("Gather", "opset1") in opset(1)
    assert ("Gather", "opset1") not in opset(7)
    assert not STRUCTURAL & set(all_versions())
    with pytest.raises(ValueError, match="not tabulated"):
        opset(LATEST + 1)


@pytest.mark.openvino
def test_opset_table_matches_the_installed_openvino():
    """Each opset's factory builds each tabulated type at the tabulated version, and
    refuses the types the opset lacks. OpenVINO 2026.4's opset 17 is still being filled:
    its factory holds the ops it adds to opset 16 and only a few of the others."""
    factory_module = pytest.importorskip("openvino._pyopenvino")
    names = set(all_versions()) | {"Parameter", "Result"}
    for number in range(1, LATEST + 1):
        factory = factory_module.NodeFactory(f"opset{number}")
        found = set()
        for name in names:
            try:
                info = factory.create(name).get_type_info()
            except Exception:  # the factory's way to say "not in this opset"
                continue
            found.add((info.name, info.version_id))
        if number == 17:
            assert set(opset(17)) - set(opset(16)) <= found <= set(opset(17))
            continue
        assert found == set(opset(number)), f"opset{number}"
