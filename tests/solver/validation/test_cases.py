"""The validation suite at CI size: every registered case must meet its tolerance.

Each case runs the same code as ``python -m solver validate --size ci``; a failing row prints
measured vs reference. Cases that take more than ~20 s on two cores are marked ``slow`` (they
still run in CI).
"""

import pytest

from solver.validation import CASES, run_case


def _params():
    for name, case in CASES.items():
        if "ci" not in case.sizes:
            continue  # e.g. cavity Re = 1000: GPU size only, see its description
        marks = [pytest.mark.slow] if case.slow else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_params()))
def test_case_meets_its_tolerance(name):
    results = run_case(name, "ci", "numpy")
    assert results and any(r.checked for r in results)
    failed = [f"{r.quantity}: {r.measured:.5g} vs {r.reference:.5g} (error {r.error:.3g} > "
              f"{r.tolerance})" for r in results if not r.passed]
    assert not failed, "; ".join(failed)
