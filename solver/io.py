"""Files a run writes: checkpoints (``.npz``), fields (``.vti``), counters (``.csv``), JSON.

A checkpoint holds what resuming needs to reproduce an uninterrupted run bit for bit: the latest
populations in the arithmetic dtype (n_tiles, q, a**d; with float16 storage their exact float64
values, which encode back to the very same stored state), the step count and metrics, the
opening links' mass flux of the last step (what a resumed vessel reports as its flows until its
next step), the configuration as JSON of its ``param`` values, and a SHA-256 hash of the solid
mask and its shape so that a checkpoint is never resumed on another geometry. Over MPI ranks
the file is a manifest of the same fields without the populations, which every rank writes as
its own part beside it (:mod:`solver.checkpoint_parts`); :func:`restore` reads both. Nothing is
pickled; files are read with ``allow_pickle=False``. Checkpoints and JSON are written
atomically: a temporary file in the same folder, fsync, then ``os.replace``, so a crash
mid-write leaves the previous file.
Fields go to ParaView-readable ``.vti`` (VTK ImageData): one cell per voxel, spacing = voxel size
in metres (1 when unknown, i.e. lattice units), origin = lower corner of voxel (0, 0, 0).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from .checkpoint_parts import CheckpointError, PartSet, parts_folder, remove_other_parts
from .config import SimulationConfig
from .vtk_pieces import cell_image, save_image

__all__ = [
    "CheckpointError", "Checkpoint", "mask_hash", "tiling_mask_hash", "config_values",
    "config_from_values",
    "config_differences",
    "atomic_write", "remove_orphaned_temporaries", "write_checkpoint", "read_checkpoint",
    "checkpoint_of", "restore", "save_simulation", "PARTS_FORMAT", "write_vti", "write_json",
    "CsvLog",
]

FORMAT = "porous-lbm checkpoint"
#: The format of a manifest of per-rank parts (:mod:`solver.checkpoint_parts`).
PARTS_FORMAT = "porous-lbm checkpoint parts"
VERSION = 1
#: Config parameters that choose how a run executes, not what it computes; a checkpoint may be
#: resumed with other values (e.g. written on the CPU, resumed on a GPU).
EXECUTION_ONLY = ("name", "backend", "gpu_layout", "tiles_per_block", "streaming",
                  "tile_storage")
#: Counters carried over on resume; the others describe the device or follow from the problem.
RESUMED_METRICS = ("steps", "seconds", "mflups", "mflups_mean")


@dataclass
class Checkpoint:
    """Contents of a checkpoint file; populations in the arithmetic dtype (n_tiles, q, a**d)."""

    config: dict[str, Any]
    shape: tuple[int, ...]
    mask_sha256: str
    step: int
    #: None in a manifest of per-rank parts (``parts``).
    populations: np.ndarray | None = field(repr=False)
    metrics: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    #: Mass flux per opening link in the last step (float64), None without driven openings
    #: (or in a checkpoint written before it was kept: the flows then read 0 until a step).
    iolet_flux: np.ndarray | None = field(default=None, repr=False)
    #: Windkessel outlets' state (4, n: capacitor, pressure, flow out, density; lattice, float64)
    #: and their opening ids (n,) int64 (:mod:`solver.windkessel`); None without any.
    windkessel: np.ndarray | None = field(default=None, repr=False)
    windkessel_ids: np.ndarray | None = field(default=None, repr=False)
    #: Numeric arrays of the way of running that a resume continues from (a pulsatile run's
    #: cycle accumulators, :meth:`solver.cycles.CycleMonitor.state_arrays`), by name.
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: The per-rank files holding the populations of a checkpoint written over MPI ranks
    #: (:mod:`solver.checkpoint_parts`), None when ``populations`` holds them.
    parts: PartSet | None = field(default=None, repr=False)


def mask_hash(solid: np.ndarray) -> str:
    """SHA-256 hex digest of a solid mask's shape and values (independent of memory order)."""
    solid = np.asarray(solid, dtype=bool)
    digest = hashlib.sha256(repr(tuple(solid.shape)).encode())
    digest.update(np.packbits(np.ascontiguousarray(solid).ravel()).tobytes())
    return digest.hexdigest()


#: Voxels per slab of :func:`tiling_mask_hash` (its temporaries: a few bytes a slab's voxel).
HASH_SLAB_VOXELS = 1 << 20


def tiling_mask_hash(tiling: Any) -> str:
    """:func:`mask_hash` of the mask a tiling holds (:meth:`solver.tiling.Tiling.mask`), made
    a slab of tile layers along x at a time: no whole mask (rank 0 of a run over MPI ranks)."""
    digest = hashlib.sha256(repr(tuple(tiling.shape)).encode())
    layers = tiling.tile_map.shape[0]
    per = max(1, HASH_SLAB_VOXELS // (tiling.a * int(np.prod(tiling.shape[1:]))))
    carry = np.zeros(0, dtype=bool)  # bits of a byte the previous slab left unfinished
    for first in range(0, layers, per):
        end = min(layers, first + per)
        rows = np.flatnonzero((tiling.tiles[:, 0] >= first) & (tiling.tiles[:, 0] < end))
        slab = tiling.scatter_slab(tiling.solid[rows], tiling.tiles[rows], 0, first, end,
                                   fill=True)
        bits = np.concatenate([carry, slab.ravel()]) if carry.size else slab.ravel()
        del slab  # x slowest: the slabs' ravels in order are the whole mask's
        whole = bits.size - bits.size % 8
        digest.update(np.packbits(bits[:whole]).tobytes())
        carry = bits[whole:]
    if carry.size:
        digest.update(np.packbits(carry).tobytes())
    return digest.hexdigest()


def config_values(config: SimulationConfig) -> dict[str, Any]:
    """The config's parameter values as JSON-ready data (param's JSON serialisation)."""
    values = json.loads(config.param.serialize_parameters())
    values.pop("name", None)
    return values


def config_from_values(values: dict[str, Any]) -> SimulationConfig:
    """Rebuild a config from :func:`config_values` (JSON object keys "1" become labels 1)."""
    restored = SimulationConfig.param.deserialize_parameters(json.dumps(values))
    for key, value in restored.items():
        if isinstance(value, dict):
            restored[key] = {_label(k): v for k, v in value.items()}
    return SimulationConfig(**restored)


def _label(key: str) -> int | str:
    return int(key) if key.lstrip("-").isdigit() else key


def config_differences(saved: dict[str, Any], config: SimulationConfig) -> list[str]:
    """``"key: saved -> now"`` for every physics parameter that differs.

    A parameter the checkpoint lacks (written before the parameter existed) counts as its
    default.
    """
    now = config_values(config)
    saved = {**config_values(SimulationConfig()), **saved}
    keys = sorted((set(saved) | set(now)) - set(EXECUTION_ONLY))
    return [f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in keys if saved.get(k) != now.get(k)]


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write a file through ``write(fh)`` so that readers see the old or the new file only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable where the OS allows it
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


def remove_orphaned_temporaries(folder: str | Path) -> list[Path]:
    """Delete ``.NAME.<pid>.tmp`` files of :func:`atomic_write` and ``.NAME.<pid>.tmp.vti``
    files of :func:`write_vti` whose process is gone."""
    removed = []
    # .NAME.<pid>.tmp (atomic_write) and .fields_N.<pid>.tmp.vti (write_vti)
    for tmp in [*Path(folder).glob(".*.*.tmp"), *Path(folder).glob(".*.*.tmp.vti")]:
        pid = tmp.name.removesuffix(".vti").rsplit(".", 2)[-2]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    """True when a process ``pid`` exists (a writer that may still finish its file)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # exists under another user; OverflowError: not a pid, keep the file
    return True


def _write_npz(fh: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    np.savez(fh, **arrays)


def write_checkpoint(path: str | Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint`` atomically as ``.npz`` (no pickles)."""
    parts = checkpoint.parts
    arrays = {
        "format": np.array(FORMAT if parts is None else PARTS_FORMAT),
        "version": np.array(VERSION),
        "config": np.array(json.dumps(checkpoint.config)),
        "shape": np.array(checkpoint.shape, dtype=np.int64),
        "mask_sha256": np.array(checkpoint.mask_sha256),
        "step": np.array(checkpoint.step, dtype=np.int64),
        "metrics": np.array(json.dumps(checkpoint.metrics)),
        "extra": np.array(json.dumps(checkpoint.extra)),
    }
    if parts is None:
        arrays["populations"] = checkpoint.populations
    else:  # a manifest: the populations lie in the ranks' files
        arrays.update({
            "parts_token": np.array(parts.token),
            "parts_tiles": np.asarray(parts.tiles_per_part, dtype=np.int64),
            "parts_shape": np.array(parts.shape, dtype=np.int64),
            "parts_dtype": np.array(np.dtype(parts.dtype).name),
            "parts_axis": np.array(parts.axis, dtype=np.int64),
            "parts_bounds": np.asarray(parts.bounds, dtype=np.int64)})
    if checkpoint.iolet_flux is not None:
        arrays["iolet_flux"] = np.asarray(checkpoint.iolet_flux, dtype=np.float64)
    if checkpoint.windkessel is not None:
        arrays["windkessel"] = np.asarray(checkpoint.windkessel, dtype=np.float64)
        arrays["windkessel_ids"] = np.asarray(checkpoint.windkessel_ids, dtype=np.int64)
    for name, value in checkpoint.arrays.items():
        arrays[RUN_ARRAY + name] = np.asarray(value)
    return atomic_write(path, lambda fh: _write_npz(fh, arrays))


#: Prefix of the stored names of :attr:`Checkpoint.arrays`.
RUN_ARRAY = "run_"
#: Dtypes a run array may have (no objects, strings or complex values).
RUN_ARRAY_DTYPES = (np.float64, np.float32, np.int64)

#: Largest step count a checkpoint may hold (10^12 steps is years of GPU time).
MAX_STEP = 10**12


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint written by :func:`write_checkpoint`; check its fields' types."""
    checkpoint = _read_checkpoint_file(path)
    _check_fields(checkpoint, path)
    return checkpoint


def _open_regular(path: str | Path) -> IO[bytes]:
    """Open a regular file for reading; a FIFO or device is an OSError (it blocked forever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file (a pipe, device or folder)")
    return os.fdopen(fd, "rb")


def _read_checkpoint_file(path: str | Path) -> Checkpoint:
    """The fields of a checkpoint file as stored; any failure to read it is a CheckpointError."""
    try:
        with _open_regular(path) as fh, zipfile.ZipFile(fh) as archive:
            # bzip2/LZMA members are inflated whole whatever is asked (issue 31 item 1).
            if any(i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
                   for i in archive.infolist()):
                raise CheckpointError(f"{path} uses a zip compression other than stored or "
                                      "deflate; it was not written by porous-lbm.")
            fh.seek(0)
            return _checkpoint_of_npz(fh, path)
    except CheckpointError:
        raise
    except RecursionError:  # JSON nested 100,000 deep in config, metrics or extra
        raise CheckpointError(f"Cannot read checkpoint {path}: its JSON fields nest too "
                              "deeply; it is damaged or not a checkpoint.") from None
    # A truncated or bit-flipped file fails anywhere in zipfile/zlib/numpy/json (BadZipFile,
    # EOFError, zlib.error, TypeError, ...): for the user all mean "damaged checkpoint".
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"Cannot read checkpoint {path} ({type(exc).__name__}: {exc}); it "
                              "is damaged or not a checkpoint. Pass an intact checkpoint.npz "
                              "written by `python -m solver run` or Simulation.save, or start "
                              "again without --resume.") from exc


def _checkpoint_of_npz(fh: IO[bytes], path: str | Path) -> Checkpoint:
    with np.load(fh, allow_pickle=False) as data:
        kind = str(data["format"])
        if kind not in (FORMAT, PARTS_FORMAT) or int(data["version"]) != VERSION:
            raise CheckpointError(f"{path} is not a version-{VERSION} porous-lbm checkpoint.")
        parts = None if kind == FORMAT else _part_set(data, path)
        return Checkpoint(
            config=json.loads(str(data["config"])),
            shape=tuple(int(n) for n in data["shape"]),
            mask_sha256=str(data["mask_sha256"]), step=int(data["step"]),
            populations=data["populations"] if parts is None else None, parts=parts,
            metrics=json.loads(str(data["metrics"])),
            extra=json.loads(str(data["extra"])),
            iolet_flux=data["iolet_flux"] if "iolet_flux" in data.files else None,
            windkessel=data["windkessel"] if "windkessel" in data.files else None,
            windkessel_ids=data["windkessel_ids"] if "windkessel_ids" in data.files else None,
            arrays={k[len(RUN_ARRAY):]: data[k] for k in data.files if k.startswith(RUN_ARRAY)},
        )


def _part_set(data: Any, path: str | Path) -> PartSet:
    """The :class:`PartSet` a manifest names, its fields checked (files in NAME.parts)."""
    dtype = str(data["parts_dtype"])
    if dtype not in ("float32", "float64"):
        raise CheckpointError(f"The checkpoint manifest {path} is damaged: its populations are "
                              f"{dtype!r}, not float32 or float64.")
    return PartSet(folder=parts_folder(path), token=str(data["parts_token"]),
                   tiles_per_part=np.asarray(data["parts_tiles"]),
                   shape=tuple(int(n) for n in data["parts_shape"]), dtype=np.dtype(dtype),
                   axis=int(data["parts_axis"]), bounds=np.asarray(data["parts_bounds"])
                   ).check(path)


def _check_fields(checkpoint: Checkpoint, path: str | Path) -> None:
    """Refuse fields of the wrong kind: a crafted file resumed bool or complex populations
    (imaginary part dropped), step -5 or 2^62, or a list as metrics, with exit 0."""
    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"The checkpoint {path} is damaged: {what}. Resume from an intact "
                               "checkpoint or start again without --resume.")

    pops = checkpoint.populations
    if pops is None and checkpoint.parts is None:
        raise bad("it holds neither populations nor parts")
    if pops is not None and (pops.dtype not in (np.float32, np.float64) or pops.ndim != 3):
        raise bad(f"its populations are {pops.dtype} of {pops.ndim} dimensions, not a float "
                  "(n_tiles, q, nodes) array")
    if not 0 <= checkpoint.step <= MAX_STEP:
        raise bad(f"its step {checkpoint.step} is not between 0 and {MAX_STEP}")
    for name in ("config", "metrics", "extra"):
        if not isinstance(getattr(checkpoint, name), dict):
            raise bad(f"its {name} is a {type(getattr(checkpoint, name)).__name__}, not a mapping")
    for key in RESUMED_METRICS:
        value = checkpoint.metrics.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0 \
                or not np.isfinite(value):
            raise bad(f"its metric {key} is {value!r}, not a non-negative number")
    flux = checkpoint.iolet_flux
    if flux is not None and (flux.dtype != np.float64 or flux.ndim != 1):
        raise bad(f"its opening fluxes are {flux.dtype} of {flux.ndim} dimensions, not float64")
    _check_windkessel(checkpoint, bad)
    for name, value in checkpoint.arrays.items():
        if value.dtype not in RUN_ARRAY_DTYPES or value.ndim > 3:
            raise bad(f"its array {name!r} is {value.dtype} of {value.ndim} dimensions, not a "
                      "float64, float32 or int64 array of at most 3")
        if value.dtype != np.int64 and not np.isfinite(value).all():
            raise bad(f"its array {name!r} holds values that are not finite")


def _check_windkessel(checkpoint: Checkpoint, bad: Callable[[str], CheckpointError]) -> None:
    """Refuse a Windkessel state that is not (4, n) finite float64 with n distinct ids."""
    state, ids = checkpoint.windkessel, checkpoint.windkessel_ids
    if state is None and ids is None:
        return
    if state is None or ids is None:
        raise bad("it holds Windkessel outlet ids without their state, or the reverse")
    if ids.dtype != np.int64 or ids.ndim != 1 or len(set(ids.tolist())) != ids.size:
        raise bad(f"its Windkessel outlet ids are {ids.dtype} {ids.tolist()!r}, not distinct "
                  "int64 opening ids")
    if state.dtype != np.float64 or state.shape != (4, ids.size):
        raise bad(f"its Windkessel state is {state.dtype} of shape {state.shape}, not float64 "
                  f"of shape (4, {ids.size})")
    if not np.isfinite(state).all():
        raise bad("its Windkessel state holds values that are not finite")


def checkpoint_of(sim, extra: dict[str, Any] | None = None,
                  arrays: dict[str, np.ndarray] | None = None,
                  populations: bool = True) -> Checkpoint:
    """Snapshot of a Simulation (populations decoded, in the arithmetic dtype; float64 with
    float16 storage, which holds every stored value exactly: solver.storage), with its
    Windkessel outlets' state and the way of running's ``arrays``; without ``populations``
    the rest of it (a manifest's fields: the ranks write the populations)."""
    wk = getattr(sim, "windkessel_state", lambda: None)()
    return Checkpoint(
        config=config_values(sim.config), shape=tuple(sim.shape),
        mask_sha256=sim.mask_sha256, step=sim.time_step,
        populations=sim.populations().astype(sim.problem.storage.checkpoint_dtype)
        if populations else None,
        metrics=sim.metrics.as_dict(), extra=dict(extra or {}),
        iolet_flux=sim.backend.iolet_flux(sim.state),
        windkessel=wk, arrays=dict(arrays or {}),
        windkessel_ids=None if wk is None else np.array(sim.windkessel_ids(), dtype=np.int64),
    )


def restore(sim, checkpoint: Checkpoint) -> None:
    """Load ``checkpoint`` into ``sim`` after checking geometry, configuration and layout."""
    digest = sim.mask_sha256
    if digest != checkpoint.mask_sha256 or tuple(checkpoint.shape) != tuple(sim.shape):
        raise CheckpointError(
            f"The checkpoint was written for another geometry (shape {checkpoint.shape}, "
            f"sha256 {checkpoint.mask_sha256[:12]}...) than this one (shape "
            f"{tuple(sim.shape)}, sha256 {digest[:12]}...); resume with the geometry it "
            "was written for, or start a new run without --resume.")
    changed = config_differences(checkpoint.config, sim.config)
    if changed:
        raise CheckpointError(
            "The checkpoint was written with another configuration (" + "; ".join(changed)
            + "); resume with the configuration it was written for, or start a new run.")
    expected = (sim.tiling.n_tiles, sim.problem.lattice.q, sim.tiling.nodes_per_tile)
    dtype = sim.problem.storage.checkpoint_dtype
    stored = checkpoint.populations if checkpoint.parts is None else checkpoint.parts
    if np.dtype(stored.dtype) != dtype:
        raise CheckpointError(f"Checkpoint populations are {stored.dtype}, this "
                              f"run stores {np.dtype(dtype)}: the checkpoint is damaged or was "
                              "written with another precision; resume with that precision.")
    if tuple(stored.shape) != expected:
        raise CheckpointError(f"Checkpoint populations have shape {tuple(stored.shape)}"
                              f", this run needs {expected}; the tiling code has changed.")
    flux = checkpoint.iolet_flux if sim.problem.iolets is not None else None
    if flux is not None and flux.shape != (sim.problem.iolets.n_links,):
        raise CheckpointError(f"Checkpoint has {flux.size} opening links, this run "
                              f"{sim.problem.iolets.n_links}; the opening tables have changed: "
                              "resume with the version that wrote it, or start a new run.")
    sim.allocate()
    if checkpoint.parts is None:
        sim.backend.set_populations(sim.state, checkpoint.populations)
    elif sim.backend.reads_parts:  # ranks: each reads its own tiles' rows
        sim.backend.load_parts(sim.state, checkpoint.parts)
    else:  # one process: the parts gathered once
        sim.backend.set_populations(sim.state, checkpoint.parts.assemble())
    sim.backend.set_step(sim.state, checkpoint.step)  # seeds float16 stochastic rounding
    if flux is not None:
        sim.backend.set_iolet_flux(sim.state, flux)  # the saved step's flows until the next
    attached = tuple(getattr(sim, "windkessel_ids", tuple)())
    if checkpoint.windkessel is not None:
        sim.restore_windkessel(tuple(int(i) for i in checkpoint.windkessel_ids),
                               checkpoint.windkessel)
    elif attached:
        raise CheckpointError(f"The checkpoint holds no Windkessel state, this run couples "
                              f"outlets {list(attached)}: it was written without them (or by "
                              "an older version); start a new run.")
    for key in RESUMED_METRICS:
        if key in checkpoint.metrics:
            setattr(sim.metrics, key, checkpoint.metrics[key])


def save_simulation(sim, path: str | Path, extra: dict[str, Any] | None = None,
                    arrays: dict[str, np.ndarray] | None = None) -> Path:
    """Write a checkpoint of ``sim`` to ``path`` atomically: one file (the single-process
    format), or, where the backend's ranks write their own parts (``writes_parts``), a
    manifest at ``path`` after the parts (:mod:`solver.checkpoint_parts`); then the files of
    earlier writes' parts are removed."""
    if not sim.backend.writes_parts:
        written = write_checkpoint(path, checkpoint_of(sim, extra, arrays))
        remove_other_parts(parts_folder(path), None)
        return written
    checkpoint = checkpoint_of(sim, extra, arrays, populations=False)
    checkpoint.parts = sim.backend.write_parts(sim.state, parts_folder(path), checkpoint.step,
                                               sim.problem.storage.checkpoint_dtype)
    written = write_checkpoint(path, checkpoint)
    remove_other_parts(checkpoint.parts.folder, checkpoint.parts.token)
    remove_orphaned_temporaries(checkpoint.parts.folder)  # a killed rank's half-written part
    return written


def write_vti(path: str | Path, fields_: dict[str, np.ndarray], voxel_size: float | None = None,
              origin: tuple[float, ...] | None = None, extra: dict[str, np.ndarray] | None = None,
              ) -> Path:
    """Write ``rho`` (grid) and ``u`` ((d,) + grid, padded to 3 components) as cell data."""
    grid = cell_image(fields_["rho"], fields_["u"], extra, voxel_size, origin)
    return save_image(grid, path)


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON, atomically."""
    text = json.dumps(data, indent=2, default=_json_default) + "\n"
    return atomic_write(path, lambda fh: fh.write(text.encode()))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class CsvLog:
    """Append-only CSV of one row per output interval; a resume keeps rows up to its step."""

    def __init__(self, path: str | Path, columns: list[str], keep_until: int | None = None):
        self.path = Path(path)
        self.columns = list(columns)
        rows = self._rows_until(keep_until) if keep_until is not None else []
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, self.columns)
        writer.writeheader()
        writer.writerows(rows)
        # Replaced, never opened for writing: a symlink planted as history.csv is replaced by
        # the file instead of overwriting its target outside the folder (issue 31 item 11).
        atomic_write(self.path, lambda fh: fh.write(text.getvalue().encode()))

    def _rows_until(self, step: int) -> list[dict]:
        if not self.path.exists() or self.path.is_symlink():
            return []
        with open(self.path, newline="") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames != self.columns:
                return []
            return [row for row in reader if row["step"] and int(row["step"]) <= step]

    def append(self, row: dict[str, Any]) -> None:
        """Write one row (missing or None values are left empty)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)  # as above
        with open(fd, "a", newline="") as fh:
            clean = {k: ("" if row.get(k) is None else row[k]) for k in self.columns}
            csv.DictWriter(fh, self.columns).writerow(clean)
