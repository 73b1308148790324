"""The kernels composed from parts (issue 27) are the kernels of before: the same code.

``tests/solver/data/kernel_hashes.json`` holds the hash of the code of every kernel the
generators made on main at 1da8a13 (``tests/solver/kernel_hashes.py``; ``//`` comments aside,
which name modules). Every kernel generated now must have its hash there, unchanged; the
kernels of the table no longer generated must be exactly those of the knobs that were removed
(``solver/backends/cuda/KERNELS.md``): the in-place step's register caps and read-only loads
(tiled kernels named ``..._aan_r<N>``, ``..._aal_nc`` and the like) and the compact kernels'
paired halo entries and register caps (``..._w``, ``..._r<N>``). A kernel
of a new name (a new collision model, say) is not in the table and passes; rerun the script
only for a deliberate change of existing kernels' code, in the commit that makes it. No kernel
is compiled.
"""

from __future__ import annotations

import json
import re

from .kernel_hashes import TABLE, kernel_hashes

#: Name endings of the removed knobs' kernels.
REMOVED = re.compile(r"^lbm_(full|propagate)_\w*_aa[nl]\w*(_r\d+|_nc)$"
                     r"|^lbm_compact_\w*(_w|_r\d+)$")


def test_every_kernel_keeps_its_code_and_only_removed_knobs_are_gone() -> None:
    table = json.loads(TABLE.read_text())
    now = kernel_hashes()
    changed = [name for name, h in now.items() if table.get(name, h) != h]
    assert changed == [], f"{len(changed)} kernels changed, e.g. {changed[:5]}"
    gone = sorted(set(table) - set(now))
    assert [n for n in gone if not REMOVED.search(n)] == []
    assert all(not REMOVED.search(n) for n in now)
    # the whole space (5493 kernels at 1da8a13 after the removal), minus the removed knobs (5202)
    assert len(set(now) & set(table)) > 5000 and len(gone) > 5000
