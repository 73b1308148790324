"""Length units of geometry files (STL coordinates carry none), and a guess from the size.

An STL file stores bare numbers: the same aorta is 0.167 long when exported in metres and 167
in millimetres. :func:`length_unit` turns a user's choice (``"m"``, ``"mm"``, ``"µm"``, a
number of metres per file unit, or ``"auto"``) into a :class:`LengthUnit`; ``"auto"`` guesses
from the longest edge ``L`` of the bounding box (in file units) with this rule:

- ``L <= 1``: metres (an object of at most 1 m; a millimetre file below 1 mm is rare);
- ``1 < L <= 1000``: millimetres (1 mm to 1 m, vessels and most CAD parts);
- ``L > 1000``: micrometres (a millimetre file above 1 m is implausible here; micro-CT
  surfaces exported in µm are thousands of units long).

A guessed unit always says so (:meth:`LengthUnit.describe`), so the user can correct it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import GeometryError

__all__ = ["UNITS", "LengthUnit", "guess_length_unit", "length_unit"]

#: Unit symbol -> (metres per unit, plural name for messages).
UNITS: dict[str, tuple[float, str]] = {
    "m": (1.0, "metres"),
    "mm": (1e-3, "millimetres"),
    "µm": (1e-6, "micrometres"),
}
_ALIASES = {"um": "µm", "μm": "µm", "micron": "µm", "microns": "µm", "meter": "m",
            "metre": "m", "meters": "m", "metres": "m", "millimetre": "mm",
            "millimeter": "mm", "millimetres": "mm", "millimeters": "mm"}
AUTO = "auto"


@dataclass(frozen=True)
class LengthUnit:
    """A file's length unit: metres per file unit, its symbol and whether it was guessed."""

    metres: float
    symbol: str = ""
    guessed_from: tuple[float, ...] = ()

    @property
    def guessed(self) -> bool:
        """True when the unit was guessed from the extent rather than chosen."""
        return bool(self.guessed_from)

    def describe(self) -> str:
        """One sentence for the user, e.g. 'read as millimetres (guessed from a 167 x 80 x 60
        extent); change Units if wrong'."""
        name = UNITS[self.symbol][1] if self.symbol in UNITS else f"{self.metres:g} m per unit"
        if not self.guessed:
            return f"STL coordinates read as {name}."
        extent = " x ".join(f"{v:.3g}" for v in self.guessed_from)
        return (f"STL coordinates read as {name} (guessed from a {extent} extent); "
                "change Units if wrong.")


def guess_length_unit(extent: Sequence[float]) -> LengthUnit:
    """The unit of a surface whose bounding box is ``extent`` file units (rule: module doc)."""
    longest = max(float(v) for v in extent)
    if longest <= 1.0:
        symbol = "m"
    elif longest <= 1000.0:
        symbol = "mm"
    else:
        symbol = "µm"
    return LengthUnit(UNITS[symbol][0], symbol, tuple(float(v) for v in extent))


def length_unit(value: object, extent: Sequence[float] | None = None) -> LengthUnit:
    """A :class:`LengthUnit` from 'm', 'mm', 'µm', 'auto' (needs ``extent``) or metres/unit."""
    if isinstance(value, str):
        key = value.strip()
        key = _ALIASES.get(key.lower(), key)
        if key.lower() == AUTO:
            if extent is None:
                raise GeometryError("unit='auto' needs the extent of the file's contents.")
            return guess_length_unit(extent)
        if key in UNITS:
            return LengthUnit(UNITS[key][0], key)
        raise GeometryError(f"Unknown length unit {value!r}; choose one of "
                            f"{[*UNITS, AUTO]} or give metres per file unit (e.g. 0.001).")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise GeometryError(f"unit must be one of {[*UNITS, AUTO]} or a positive number of "
                            f"metres per file unit, got {value!r}.")
    metres = float(value)
    if not (math.isfinite(metres) and metres > 0):
        raise GeometryError(f"unit must be a positive number of metres per file unit, "
                            f"got {value!r}.")
    symbol = next((s for s, (m, _) in UNITS.items() if math.isclose(m, metres)), "")
    return LengthUnit(metres, symbol)
