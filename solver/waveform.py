"""Pulsatile inflow: a periodic mean-speed waveform and its Womersley velocity profile per harmonic.

A waveform inlet's mean speed into the fluid is the truncated Fourier series

    U(t) = Re sum_k c_k exp(i k omega t),   omega = 2 pi / T,   k = 0..K,

``c_0`` real (the mean), ``T`` the heart period. A :class:`Waveform` holds it in lattice units
(``T`` in steps, ``c_k`` in nodes/step); :func:`si_waveform` builds one from a case file's SI
entry (a CSV table of (t, flow rate or mean speed), resampled over one period and transformed,
or Fourier coefficients given directly).

With the ``poiseuille`` profile each harmonic gets the Womersley profile of a rigid circular
tube (Womersley, J. Physiol. 127, 553 (1955)) at its Womersley number
``alpha_k = R sqrt(k omega / nu)``, normalised to mean 1 over the disc:

    W_k(r) = [1 - J0(L r/R) / J0(L)] / [1 - 2 J1(L) / (L J0(L))],   L = i^{3/2} alpha_k,

and the steady harmonic (k = 0) is Poiseuille's ``2 (1 - r^2/R^2)``; with ``uniform`` every
harmonic is a plug. The opening links' pass (:mod:`solver.iolets`) evaluates the sum at each
step from the step count with the phase ``theta_k = 2 pi k frac(n / T)`` in double, on both
backends (the CUDA pass reads its device step counter, so CUDA-graph replays pulse without a
host update).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .values import ConfigError, is_number

__all__ = ["Waveform", "MAX_HARMONICS", "womersley_shape", "harmonic_phases",
           "parse_waveform", "si_waveform", "si_peak_speed", "si_period", "read_waveform_csv",
           "fourier_of_table", "table_fourier", "parse_waveform_text", "BUILTIN_WAVEFORMS",
           "BUILTIN_TABLES", "builtin_waveform", "MAX_CSV_BYTES"]

#: Harmonics kept by default from a table (a heartbeat is described well by 10; each one costs
#: two multiply-adds per opening link and step).
MAX_HARMONICS = 10


@dataclass(frozen=True)
class Waveform:
    """Periodic mean speed into the fluid, lattice units: ``period`` (steps) and the complex
    Fourier coefficients ``coefficients`` (nodes/step), ``U(n) = Re sum_k c_k e^{i k w n}``."""

    period: float
    coefficients: tuple[complex, ...]

    @property
    def mean(self) -> float:
        """The steady part ``c_0`` (nodes/step)."""
        return float(self.coefficients[0].real)

    @property
    def harmonics(self) -> int:
        """Number of unsteady harmonics ``K``."""
        return len(self.coefficients) - 1

    def speed(self, step: Any) -> np.ndarray:
        """Mean speed (nodes/step) at step(s) ``step``, the phases of :func:`harmonic_phases`."""
        theta = harmonic_phases(step, self.period, self.harmonics)
        c = np.asarray(self.coefficients, dtype=np.complex128)
        return np.real(c[0]) + (np.cos(theta) * c[1:].real - np.sin(theta) * c[1:].imag).sum(-1)

    def peak(self) -> float:
        """Largest |U| over a period (sampled at 512 phases, the triangle bound as a floor)."""
        sampled = np.abs(self.speed(np.linspace(0.0, self.period, 512, endpoint=False))).max()
        return float(sampled)

    def to_spec(self) -> dict:
        """The JSON-friendly lattice spec :func:`parse_waveform` reads back."""
        return {"period": self.period,
                "fourier": [[float(c.real), float(c.imag)] for c in self.coefficients]}


def harmonic_phases(step: Any, period: float, harmonics: int) -> np.ndarray:
    """Phases ``2 pi k frac(n / T)`` (k = 1..K) at step(s) ``n``, shape (..., K): the double
    arithmetic the CUDA pass repeats (fraction first, so long runs keep full precision)."""
    x = np.asarray(step, dtype=np.float64) / np.float64(period)
    x = x - np.floor(x)
    k = np.arange(1, harmonics + 1, dtype=np.float64)
    return (2.0 * math.pi) * x[..., None] * k


def womersley_shape(rho: np.ndarray, alpha: float) -> np.ndarray:
    """Womersley profile (complex, mean 1 over the unit disc) at radii ``rho = r/R`` (0..1) for
    Womersley number ``alpha`` (0: Poiseuille ``2 (1 - rho^2)``)."""
    from scipy.special import jv

    rho = np.clip(np.asarray(rho, dtype=np.float64), 0.0, 1.0)
    if alpha < 1e-6:
        return (2.0 * (1.0 - rho**2)).astype(np.complex128)
    lam = alpha * np.exp(0.75j * math.pi)  # i^{3/2} alpha
    j0 = jv(0, lam)
    return (1.0 - jv(0, lam * rho) / j0) / (1.0 - 2.0 * jv(1, lam) / (lam * j0))


def _coefficient(item: Any, where: str) -> complex:
    if is_number(item):
        return complex(float(item), 0.0)
    if (isinstance(item, (list, tuple)) and len(item) == 2 and all(is_number(x) for x in item)):
        return complex(float(item[0]), float(item[1]))
    raise ConfigError(f"{where}: each Fourier coefficient is a number or [real, imaginary], "
                      f"got {item!r}.")


def parse_waveform(spec: Any, where: str = "waveform") -> Waveform:
    """A :class:`Waveform` (lattice units) from ``{"period": steps, "fourier": [c_0, c_1, ...]}``
    (each ``c_k`` a number or [re, im], nodes/step) or a Waveform itself."""
    if isinstance(spec, Waveform):
        return spec
    if not isinstance(spec, dict) or "period" not in spec or "fourier" not in spec:
        raise ConfigError(f"{where} must be a mapping {{period: steps, fourier: [c0, [re, im], "
                          f"...]}} in lattice units, got {spec!r}.")
    period = spec["period"]
    if not is_number(period) or not (0.0 < period < math.inf):
        raise ConfigError(f"{where}: period must be a positive number of steps, got "
                          f"{period!r}.")
    coeffs = spec["fourier"]
    if not isinstance(coeffs, (list, tuple)) or not coeffs:
        raise ConfigError(f"{where}: fourier must be a non-empty list [c0, c1, ...].")
    values = [_coefficient(c, where) for c in coeffs]
    if values[0].imag != 0.0:
        raise ConfigError(f"{where}: the mean c0 must be real, got {values[0]!r}.")
    if len(values) - 1 > 4 * MAX_HARMONICS:
        raise ConfigError(f"{where}: {len(values) - 1} harmonics; keep at most "
                          f"{4 * MAX_HARMONICS} (each costs work per opening link and step).")
    if not all(math.isfinite(abs(v)) for v in values):
        raise ConfigError(f"{where}: Fourier coefficients must be finite.")
    return Waveform(float(period), tuple(values))


def fourier_of_table(t: np.ndarray, value: np.ndarray, period: float,
                     harmonics: int = MAX_HARMONICS) -> list[complex]:
    """Coefficients ``c_0..c_K`` of a periodic table (t, value), linearly interpolated on 1024
    uniform phases of ``period`` (same units as ``t``)."""
    t = np.asarray(t, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    n = 1024
    grid = np.arange(n) * (period / n)
    samples = np.interp(grid, t - t[0], value, period=period)
    spectrum = np.fft.rfft(samples) / n
    coeffs = [complex(spectrum[0].real, 0.0)]
    coeffs += [2.0 * complex(spectrum[k]) for k in range(1, min(harmonics, n // 2 - 1) + 1)]
    return coeffs


#: Largest waveform CSV accepted (bytes): a heartbeat needs tens of rows, not megabytes.
MAX_CSV_BYTES = 64_000


def read_waveform_csv(path: Path) -> tuple[str, np.ndarray, np.ndarray]:
    """(quantity, t in s, values in SI) of a CSV with a header ``t,flow_rate`` (m^3/s) or
    ``t,mean_speed`` (m/s) and one row per sample over one period (the last time is the
    period's end if it repeats the first value, else the period is inferred by the caller)."""
    if not path.is_file():
        raise ConfigError(f"waveform file {str(path)!r} does not exist (paths are relative to "
                          "the case file).")
    if path.stat().st_size > MAX_CSV_BYTES:
        raise ConfigError(f"{path.name}: a waveform CSV holds at most {MAX_CSV_BYTES:,} bytes "
                          "(one period of (t, value) rows); resample it.")
    with path.open(newline="") as handle:
        return parse_waveform_text(handle.read(), path.name)


def parse_waveform_text(text: str, name: str = "waveform") -> tuple[str, np.ndarray, np.ndarray]:
    """(quantity, t in s, values in SI) of a waveform CSV's text (read as data, never run):
    the parser of :func:`read_waveform_csv`, for uploads as well as case files."""
    if len(text) > MAX_CSV_BYTES:
        raise ConfigError(f"{name}: a waveform CSV holds at most {MAX_CSV_BYTES:,} bytes (one "
                          "period of (t, value) rows); resample it.")
    rows = [r for r in csv.reader(text.splitlines()) if r and not r[0].lstrip().startswith("#")]
    header = [h.strip() for h in rows[0]] if rows else []
    if len(header) != 2 or header[0] not in ("t", "time") or \
            header[1] not in ("flow_rate", "mean_speed"):
        raise ConfigError(f"{name}: the first row must be `t,flow_rate` (m^3/s) or "
                          f"`t,mean_speed` (m/s), got {header!r}.")
    try:
        data = np.array([[float(x) for x in r] for r in rows[1:]], dtype=np.float64)
    except ValueError as exc:
        raise ConfigError(f"{name}: every row after the header must be two numbers "
                          f"({exc}).") from exc
    if data.ndim != 2 or data.shape[0] < 4 or data.shape[1] != 2 or \
            not np.all(np.diff(data[:, 0]) > 0) or not np.all(np.isfinite(data)):
        raise ConfigError(f"{name}: needs at least 4 rows of finite (t, value) with t "
                          "increasing.")
    return header[1], data[:, 0], data[:, 1]


def table_fourier(t: np.ndarray, value: np.ndarray, period: float | None = None,
                  harmonics: int = MAX_HARMONICS) -> tuple[float, list[complex]]:
    """(period, coefficients) of a table over one period: the span of ``t`` unless ``period``
    is given, a closing sample that repeats the first dropped."""
    if period is None:
        period = float(t[-1] - t[0])
        if value[-1] == value[0]:
            t, value = t[:-1], value[:-1]  # the closing sample repeats the first
    return float(period), fourier_of_table(t, value, period, harmonics)


#: Built-in heartbeat shapes, period 1 s, as (t s, flow / mean flow) tables. Neither is a
#: measurement: each is a smooth hand-drawn approximation of the textbook shape of its artery
#: (e.g. the waveforms in Holdsworth et al., Physiol. Meas. 20, 219 (1999), common carotid,
#: and Olufsen et al., Ann. Biomed. Eng. 28, 1281 (2000), ascending aorta), for trying a
#: pulsatile run; scale it with the row's mean value and use a measured CSV for a study.
BUILTIN_TABLES: dict[str, tuple[tuple[float, float], ...]] = {
    # Carotid: positive throughout; systolic peak ~2.4x the mean near 0.13 s, dicrotic notch.
    "carotid-like": ((0.00, 0.70), (0.05, 0.80), (0.10, 1.90), (0.13, 2.30), (0.16, 2.20),
                     (0.20, 1.80), (0.25, 1.30), (0.30, 1.05), (0.35, 0.90), (0.38, 0.85),
                     (0.42, 1.05), (0.46, 1.10), (0.52, 0.95), (0.60, 0.85), (0.70, 0.80),
                     (0.80, 0.76), (0.90, 0.73)),
    # Aorta: systolic ejection to ~5x the mean, brief backflow at valve closure, still diastole.
    "aortic-like": ((0.00, 0.00), (0.05, 1.50), (0.10, 4.50), (0.15, 5.00), (0.20, 4.20),
                    (0.25, 2.80), (0.30, 1.00), (0.35, -0.40), (0.40, -0.10), (0.45, 0.10),
                    (0.55, 0.05), (0.70, 0.00), (0.85, 0.00)),
}


def _builtin_shape(name: str) -> list[complex]:
    if name not in BUILTIN_TABLES:
        raise ConfigError(f"Unknown built-in waveform {name!r}; choose one of "
                          f"{list(BUILTIN_TABLES)}.")
    table = np.asarray(BUILTIN_TABLES[name], dtype=np.float64)
    coeffs = fourier_of_table(table[:, 0], table[:, 1], 1.0)
    return [c / coeffs[0].real for c in coeffs]  # mean exactly 1


#: Built-in waveforms: name -> Fourier coefficients of flow / mean flow (c_0 = 1), period 1 s.
BUILTIN_WAVEFORMS: dict[str, list[complex]] = {name: _builtin_shape(name)
                                               for name in BUILTIN_TABLES}


def builtin_waveform(name: str, mean: float, quantity: str = "mean_speed",
                     period_s: float = 1.0) -> dict:
    """A case file's SI ``waveform`` entry of built-in ``name`` scaled to ``mean`` (m/s for
    ``mean_speed``, m^3/s for ``flow_rate``) over ``period_s`` seconds."""
    if name not in BUILTIN_WAVEFORMS:
        raise ConfigError(f"Unknown built-in waveform {name!r}; choose one of "
                          f"{list(BUILTIN_WAVEFORMS)}.")
    coeffs = [c * mean for c in BUILTIN_WAVEFORMS[name]]
    return {"period_s": float(period_s), "quantity": quantity,
            "fourier": [[c.real, c.imag] for c in coeffs]}


def si_waveform(entry: Any, area: float, units: Any, base: Path | None = None) -> dict:
    """The lattice spec ``{period, fourier}`` of a case file's ``waveform`` entry: a CSV path
    (``t,flow_rate`` or ``t,mean_speed``; the period is the table's span unless ``period_s``
    is given in a mapping ``{file, period_s}``) or ``{period_s, fourier: [...], quantity:
    mean_speed|flow_rate}`` (coefficients in m/s or m^3/s); ``area`` the opening's (m^2)."""
    if isinstance(entry, str):
        entry = {"file": entry}
    if not isinstance(entry, dict):
        raise ConfigError("waveform must be a CSV file name or a mapping {period_s, fourier: "
                          f"[...]}}, got {entry!r}.")
    harmonics = int(entry.get("harmonics", MAX_HARMONICS))
    if "file" in entry:
        path = Path(entry["file"])
        path = path if path.is_absolute() or base is None else base / path
        quantity, t, value = read_waveform_csv(path)
        period, coeffs = table_fourier(t, value, entry.get("period_s"), harmonics)
    else:
        quantity = entry.get("quantity", "mean_speed")
        if quantity not in ("mean_speed", "flow_rate"):
            raise ConfigError(f"waveform quantity must be mean_speed or flow_rate, got "
                              f"{quantity!r}.")
        period = entry.get("period_s")
        if not is_number(period) or not period > 0:
            raise ConfigError(f"waveform needs period_s (s, > 0), got {period!r}.")
        coeffs = [_coefficient(c, "waveform") for c in entry.get("fourier") or []]
        if not coeffs:
            raise ConfigError("waveform needs fourier: [c0, [re, im], ...] (SI).")
    scale = 1.0 / area if quantity == "flow_rate" else 1.0
    lattice = [complex(units.velocity_to_lattice(c.real * scale),
                       units.velocity_to_lattice(c.imag * scale)) for c in coeffs]
    return {"period": float(period) / units.dt, "fourier": [[c.real, c.imag] for c in lattice]}


class _Unit:
    """SI kept as is (time step 1 s, voxel 1 m): waveforms in m/s and seconds."""

    dt = 1.0

    @staticmethod
    def velocity_to_lattice(u: float) -> float:
        return u


def si_period(entry: Any, area: float) -> float:
    """The period (s) of a case file's ``waveform`` entry."""
    return float(si_waveform(entry, area, _Unit())["period"])


def si_peak_speed(entry: Any, area: float) -> float:
    """Largest mean speed (m/s) over the cycle of a case file's ``waveform`` entry."""
    spec = si_waveform(entry, area, _Unit())
    return parse_waveform(spec).peak()
