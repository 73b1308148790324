"""Checkpoints written by several ranks at once: one pair of ``.npy`` files per rank.

A run over N MPI ranks writes its checkpoint ``NAME.npz`` as a small manifest (every field of a
single-process checkpoint but the populations, and a :class:`PartSet`: the ranks, the tiles
each part holds, the decomposition axis and slab bounds, and the token that names this write's
files) and, in the folder ``NAME.parts/`` beside it, for every rank r::

    <token>.r<r>.tiles.npy         global numbers of the rank's tiles, int64 (n,)
    <token>.r<r>.populations.npy   their populations in the checkpoint dtype (n, q, a**d)

Each rank writes its own pair (atomically, :func:`solver.io.atomic_write`), so no rank ever
holds the whole state; the manifest is written last, replacing the previous one, and only then
are other writes' files removed (:func:`remove_other_parts`): a crash at any point leaves the
previous checkpoint whole. A reader takes rows by global tile number (:meth:`PartSet.read_rows`
through a memory map: only the rows asked for are read), so the parts resume on any number of
ranks, each reading its own slab, or in one process (:meth:`PartSet.assemble`).

Nothing in the files is trusted: file names come from the token (checked against
:data:`TOKEN_PATTERN`) and the rank number, never from the files; arrays are read with
``allow_pickle=False`` and their dtype, shape, tile numbers and cover are checked.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["CheckpointError", "PartSet", "parts_folder", "new_token", "remove_other_parts",
           "TOKEN_PATTERN", "PART_DTYPES"]

#: A write's token: its step and random hex digits (nothing that could name another path).
TOKEN_PATTERN = re.compile(r"s[0-9]{12}-[0-9a-f]{12}")
#: Dtypes a part's populations may have (the checkpoint dtypes).
PART_DTYPES = (np.float32, np.float64)
#: Largest number of parts a manifest may name.
MAX_PARTS = 1 << 16


class CheckpointError(ValueError):
    """A checkpoint is unreadable or belongs to another geometry or configuration."""


def parts_folder(path: str | Path) -> Path:
    """The folder of the per-rank files of the checkpoint ``path`` (``NAME.parts``)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.parts")


def new_token(step: int) -> str:
    """A fresh token for the parts of a checkpoint at ``step``."""
    return f"s{int(step):012d}-{secrets.token_hex(6)}"


@dataclass(frozen=True)
class PartSet:
    """The per-rank files of one checkpoint: ``folder``, ``token``, ``tiles_per_part`` (int64,
    one count per rank), the whole ``shape`` (n_tiles, q, a**d) and ``dtype`` of the
    populations, the decomposition ``axis`` and slab ``bounds`` (tile layers) they were
    written with (informative: readers go by tile numbers)."""

    folder: Path
    token: str
    tiles_per_part: np.ndarray = field(repr=False)
    shape: tuple[int, int, int]
    dtype: np.dtype
    axis: int = 0
    bounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)

    @property
    def n_parts(self) -> int:
        """Number of parts (the ranks that wrote them)."""
        return int(self.tiles_per_part.size)

    def paths(self, rank: int) -> tuple[Path, Path]:
        """(tiles, populations) file of part ``rank``."""
        stem = self.folder / f"{self.token}.r{int(rank):05d}"
        return Path(f"{stem}.tiles.npy"), Path(f"{stem}.populations.npy")

    def check(self, where: str | Path) -> PartSet:
        """This part set if its fields are sound, else CheckpointError naming ``where``."""
        def bad(what: str) -> CheckpointError:
            return CheckpointError(f"The checkpoint manifest {where} is damaged: {what}. Resume "
                                   "from an intact checkpoint or start again without --resume.")

        if not isinstance(self.token, str) or not TOKEN_PATTERN.fullmatch(self.token):
            raise bad(f"its part token {self.token!r} is not of the form sSTEP-HEX")
        counts = self.tiles_per_part
        if counts.dtype != np.int64 or counts.ndim != 1 or not 1 <= counts.size <= MAX_PARTS \
                or (counts < 0).any():
            raise bad(f"its tiles per part are {counts.dtype} {counts.shape}, not 1 to "
                      f"{MAX_PARTS} non-negative int64 counts")
        if len(self.shape) != 3 or min(self.shape) < 1 or int(counts.sum()) != self.shape[0]:
            raise bad(f"its parts hold {int(counts.sum())} tiles, its populations' shape is "
                      f"{self.shape}")
        if np.dtype(self.dtype) not in PART_DTYPES:
            raise bad(f"its populations are {self.dtype}, not float32 or float64")
        return self

    def read_rows(self, tiles: np.ndarray) -> np.ndarray:
        """Populations (len(tiles), q, a**d) of the global tiles ``tiles`` in that order, read
        from whichever parts hold them (only those rows); CheckpointError if a part is
        missing, damaged or another write's, or if a tile is not held exactly once."""
        tiles = np.asarray(tiles, dtype=np.int64)
        out = np.empty((tiles.size, *self.shape[1:]), dtype=self.dtype)
        order = np.argsort(tiles, kind="stable")
        wanted = tiles[order]
        found = np.zeros(tiles.size, dtype=np.int64)
        for rank in range(self.n_parts):
            held = self._tiles(rank)
            hit = np.flatnonzero(np.isin(held, wanted))
            if not hit.size:
                continue
            at = order[np.searchsorted(wanted, held[hit])]
            out[at] = self._populations(rank)[hit]
            np.add.at(found, at, 1)
        if tiles.size and (found != 1).any():
            tile = int(tiles[np.flatnonzero(found != 1)[0]])
            raise CheckpointError(f"The checkpoint parts in {self.folder} hold tile {tile} "
                                  f"{int(found[tiles == tile][0])} times, not once: they are "
                                  "damaged or mixed with another write's; resume from an intact "
                                  "checkpoint or start again without --resume.")
        return out

    def assemble(self) -> np.ndarray:
        """All populations (n_tiles, q, a**d) in global tile order, in one process."""
        return self.read_rows(np.arange(self.shape[0], dtype=np.int64))

    def _tiles(self, rank: int) -> np.ndarray:
        path = self.paths(rank)[0]
        tiles = self._load(path)
        n = int(self.tiles_per_part[rank])
        if tiles.dtype != np.int64 or tiles.shape != (n,) or \
                (n and (tiles.min() < 0 or tiles.max() >= self.shape[0])):
            raise self._damaged(path, f"{tiles.dtype} {tiles.shape}, not {n} tile numbers "
                                      f"below {self.shape[0]}")
        return tiles

    def _populations(self, rank: int) -> np.ndarray:
        path = self.paths(rank)[1]
        pops = self._load(path, mmap=True)
        shape = (int(self.tiles_per_part[rank]), *self.shape[1:])
        if pops.dtype != self.dtype or pops.shape != shape:
            raise self._damaged(path, f"{pops.dtype} {pops.shape}, not {np.dtype(self.dtype)} "
                                      f"{shape}")
        return pops

    def _load(self, path: Path, mmap: bool = False) -> np.ndarray:
        """A part's array (no pickles; a regular file only: a FIFO would block forever)."""
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise OSError("not a regular file")
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except FileNotFoundError:
            raise CheckpointError(f"The checkpoint part {path} is missing: the manifest names "
                                  f"{self.n_parts} parts of write {self.token}; copy the whole "
                                  f"{self.folder.name} folder with the manifest, or start again "
                                  "without --resume.") from None
        except Exception as exc:  # noqa: BLE001 (truncated, bit-flipped, not .npy: damaged)
            raise self._damaged(path, f"{type(exc).__name__}: {exc}") from exc

    def _damaged(self, path: Path, what: str) -> CheckpointError:
        return CheckpointError(f"The checkpoint part {path} is damaged ({what}); resume from an "
                               "intact checkpoint or start again without --resume.")


def remove_other_parts(folder: str | Path, keep: str | None) -> list[Path]:
    """Delete the part files in ``folder`` of writes other than token ``keep`` (None: all),
    and the folder if it is left empty; the files removed."""
    folder = Path(folder)
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for path in folder.glob("s*.r*.*.npy"):
        if path.name.split(".", 1)[0] != keep and TOKEN_PATTERN.fullmatch(
                path.name.split(".", 1)[0]):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only if empty
    return removed
