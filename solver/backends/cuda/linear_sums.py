"""CUDA code of a small constant linear map ``y = A x`` with shared partial sums.

The MRT kernel applies the integer moment matrix ``M`` and its transpose to every node
(:mod:`.mrt`); written row by row, ``y_k = sum_j A_kj x_j`` costs one add or fused multiply-add
per nonzero entry, and the compiler may not reassociate floating-point sums to share work
between rows. :func:`linear_code` does that sharing at generation time with the greedy
algorithm of Paar (1997, "Optimized arithmetic for Reed-Solomon encoders"): while some pair of
terms ``x_a + rho x_b`` occurs (up to a factor) in two or more rows, it becomes a temporary and
those rows use it instead. Ratios are restricted to dyadic numbers (exact in binary floating
point), so a temporary rounds like the sum it replaces; only the order of the additions, hence
the last bits, differ from the row-by-row form.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["LinearCode", "linear_code", "combination", "leading_factor"]


def combination(coeffs, names, lit: Callable[[float], str]) -> str:
    """C expression sum_k coeffs[k] * names[k], grouped by equal coefficient; '' if all zero."""
    groups: dict[float, list[str]] = {}
    for c, name in zip(coeffs, names, strict=True):
        if c:
            groups.setdefault(float(c), []).append(name)
    terms = []
    for c, members in groups.items():
        inner = " + ".join(members)
        inner = f"({inner})" if len(members) > 1 else inner
        if c == 1.0:
            terms.append(inner)
        elif c == -1.0:
            terms.append(f"-{inner}")
        else:
            terms.append(f"{lit(c)} * {inner}")
    return " + ".join(terms).replace("+ -", "- ")


def _dyadic(x: Fraction) -> bool:
    """Whether x is exact in binary floating point with a short mantissa."""
    d = x.denominator
    return d & (d - 1) == 0 and abs(x.numerator) < 2**20


def _shared_pairs(rows: list[list[Fraction]]) -> list[tuple[int, int, Fraction]]:
    """Paar's greedy pass on ``rows`` (modified in place, a column appended per temporary):
    the temporaries ``(a, b, ratio)`` meaning ``x_a + ratio x_b``, in order of creation."""
    temps = []
    while True:
        counts: Counter = Counter()
        for row in rows:
            nz = [j for j, c in enumerate(row) if c]
            for x, a in enumerate(nz):
                for b in nz[x + 1:]:
                    if _dyadic(ratio := row[b] / row[a]):
                        counts[(a, b, ratio)] += 1
        if not counts:
            return temps
        # most rows first; then +-1 ratios (an add, no multiply), then the earliest columns
        (a, b, ratio), n = max(counts.items(),
                               key=lambda kv: (kv[1], abs(kv[0][2]) == 1, -kv[0][0], -kv[0][1]))
        if n < 2:
            return temps
        temps.append((a, b, ratio))
        for row in rows:
            shared = row[a] and row[b] and row[b] / row[a] == ratio
            row.append(row[a] if shared else Fraction(0))
            if shared:
                row[a] = row[b] = Fraction(0)


def leading_factor(coeffs) -> Fraction:
    """The coefficient of ``coeffs`` that, divided out, leaves the most terms at +-1, then
    the most exact (dyadic) ones, then the first; 1 if all are zero. Folded into a host
    constant it saves the multiplies."""
    nz = [Fraction(c) for c in coeffs if c]
    if not nz:
        return Fraction(1)
    return max(nz, key=lambda c: (sum(abs(x / c) == 1 for x in nz),
                                  sum(_dyadic(x / c) for x in nz), -nz.index(c)))


@dataclass(frozen=True)
class LinearCode:
    """``y = A x`` as shared temporaries ``<prefix><n> = x_a + ratio x_b`` (``temps``, in
    order) and rows over :attr:`columns` (the inputs, then the temporaries)."""

    inputs: tuple[str, ...]
    prefix: str
    temps: tuple[tuple[int, int, Fraction], ...]
    rows: tuple[tuple[Fraction, ...], ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """Names of the inputs, then of the temporaries."""
        return self.inputs + tuple(f"{self.prefix}{n}" for n in range(len(self.temps)))

    def lines(self, lit: Callable[[float], str]) -> list[str]:
        """CUDA statements defining the temporaries (``const real``)."""
        cols = self.columns
        return [f"    const real {cols[len(self.inputs) + n]} = "
                f"{combination([Fraction(1), ratio], [cols[a], cols[b]], lit)};"
                for n, (a, b, ratio) in enumerate(self.temps)]

    def expr(self, k: int, lit: Callable[[float], str], factor: Fraction = Fraction(1)) -> str:
        """C expression of row ``k`` divided by ``factor``; '' if the row is zero."""
        return combination([c / factor for c in self.rows[k]], self.columns, lit)


def linear_code(matrix: np.ndarray, names: list[str], prefix: str) -> LinearCode:
    """``y = matrix @ x`` for the inputs ``names`` with the shared temporaries of Paar's
    algorithm, named ``<prefix><n>``.

    ``matrix`` (rows, len(names)) holds small integers or dyadic fractions (moment matrices).
    """
    rows = [[Fraction(float(c)).limit_denominator(1 << 20) for c in row] for row in matrix]
    temps = _shared_pairs(rows)
    return LinearCode(tuple(names), prefix, tuple(temps), tuple(tuple(r) for r in rows))
