"""The kernels composed from parts (issue 27) are the kernels of before: the same code.

``tests/solver/data/kernel_hashes.json`` holds the hash of the code of every kernel of the
variant space (``tests/solver/kernel_hashes.py``; ``//`` comments aside, which name modules),
first taken on main at 1da8a13, before the kernels were composed from parts (the compact
kernels' taken again when the dead paired-entry branches left their templates: the same PTX,
``solver/backends/cuda/KERNELS.md``). Every kernel of
the space must have its hash there, unchanged, and the table no other kernel: a kernel the
space gains (a new collision model, say) or loses is a deliberate change of the table, in the
commit that makes it (rerun the script). No kernel is compiled.
"""

from __future__ import annotations

import json

from .kernel_hashes import TABLE, kernel_hashes


def test_every_kernel_of_the_space_keeps_its_code() -> None:
    table = json.loads(TABLE.read_text())
    now = kernel_hashes()
    changed = [name for name, h in now.items() if table.get(name, h) != h]
    assert changed == [], f"{len(changed)} kernels changed, e.g. {changed[:5]}"
    assert sorted(set(now) ^ set(table)) == []  # the table is exactly the space
