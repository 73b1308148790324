"""The options a loader declares for a person reading a file: :class:`LoaderOption` data.

Each loader module declares the keyword options a person may set when reading a file of its
format (``OPTIONS`` beside the loader: label, help, default as shown, choices or parsing, the
unit shown); :data:`geometries.loaders.dispatch.LOADER_OPTIONS` maps every format to them. The
dashboard builds its upload widgets from these declarations and :func:`loader_options` turns
what was entered into the loader's keywords, so a declared option shows as a widget and reaches
the loader with no second list. Options of one meaning (the voxel size, the pore label) are one
object shared by the loaders that take them. Lengths reach the loaders in metres.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import GeometryError

__all__ = ["LoaderOption", "VOXEL_SIZE", "PORE_VALUE", "THRESHOLD", "IMAGE_OPTIONS",
           "loader_options", "number", "shape"]

#: An option's "nothing entered" marker: the loader's own default applies.
UNSET_TEXT = ""


@dataclass(frozen=True)
class LoaderOption:
    """One option a loader declares: its keyword and how a person enters it.

    ``field`` names the entry (shared by the formats whose loaders take it); ``default`` is in
    the shown form (a number, a text, or a key of ``choices``). The loader receives
    ``choices[shown]``, ``parse(shown)`` (may raise :class:`GeometryError`) or ``shown * scale``;
    nothing when the shown value equals ``unset``, when ``requires`` (keyword, value) does not
    hold, or when the ``unless`` keyword is passed.
    """

    keyword: str
    field: str
    label: str
    doc: str
    default: Any
    choices: Mapping[str, Any] | None = None
    bounds: tuple[float | None, float | None] | None = None
    scale: float | None = None
    parse: Callable[[Any], Any] | None = None
    unset: Any = None
    requires: tuple[str, Any] | None = None
    unless: str | None = None

    def value(self, shown: Any) -> Any:
        """The loader's value of what was entered (never called with ``unset``)."""
        if self.choices is not None:
            return self.choices[shown]
        if self.parse is not None:
            return self.parse(shown)
        return shown * self.scale if self.scale is not None else shown


def loader_options(declared: Sequence[LoaderOption], shown: Mapping[str, Any]) -> dict:
    """The loader keywords of the ``declared`` options from the values entered per field."""
    out = {}
    for option in declared:
        value = shown.get(option.field, option.default)
        if isinstance(value, str):
            value = value.strip()
        if option.unset is not None and value == option.unset:
            continue
        out[option.keyword] = option.value(value)
    for option in declared:
        if option.keyword not in out:
            continue
        wanted = option.requires
        if (wanted and out.get(wanted[0]) != wanted[1]) or (option.unless in out):
            del out[option.keyword]
    return out


def number(what: str, example: str) -> Callable[[str], float]:
    """A parser of one number typed as text; the error says what to enter."""
    def parse(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise GeometryError(f"{what} {text!r} is not a number; enter {example}.") from None
    return parse


def shape(text: str) -> tuple[int, ...]:
    """'nx, ny[, nz]' (or 'nx x ny x nz') as a shape in voxels."""
    try:
        values = tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        values = ()
    if len(values) not in (2, 3) or min(values) < 1:
        raise GeometryError(f"A .raw file needs its shape: enter 'nx, ny, nz' (got {text!r}).")
    return values


#: Every loader's voxel edge, shown in micrometres (0: from the file, or unknown).
VOXEL_SIZE = LoaderOption(
    "voxel_size", "voxel_size_um", "Voxel size (µm)",
    "Voxel size in micrometres (0 = from the file / unknown; STL: 0 = from the resolution).",
    0.0, bounds=(0, None), scale=1e-6, unset=0.0)
#: Segmented images: the label of pore voxels.
PORE_VALUE = LoaderOption(
    "pore_value", "pore_value", "Pore label (images)",
    "Images: label of pore voxels (default: 0 = pore).", UNSET_TEXT,
    parse=number("Pore value", "the label of pore voxels, e.g. 0"), unset=UNSET_TEXT)
#: Grey-scale images: the grey value below which a voxel is pore.
THRESHOLD = LoaderOption(
    "threshold", "threshold", "Grey threshold (images)",
    "Grey-scale images: voxels below this value are pore (empty: a labelled image).",
    UNSET_TEXT, parse=number("Threshold", "a grey value, e.g. 0.5"), unset=UNSET_TEXT)
#: The options of every image loader (labels or grey values, voxel size).
IMAGE_OPTIONS = (PORE_VALUE, THRESHOLD, VOXEL_SIZE)
