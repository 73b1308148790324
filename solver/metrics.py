"""Performance counters: MFLUPS, tile utilisation and memory-bandwidth fraction.

MFLUPS counts fluid (non-solid) nodes only: ``fluid_nodes * steps / seconds / 1e6``. The bytes a
fluid node must move per step are ``B = 2 q n_d`` (paper eq. 10), so ``MFLUPS * B`` is the
bandwidth the run needs at least; its fraction of the device's peak says how close to the
memory-bound limit the kernel runs. Peaks come from the backend: the theoretical one from
device attributes and, where measured, a device-to-device copy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["Metrics", "mflups", "bandwidth_fraction"]


def mflups(fluid_nodes: int, steps: int, seconds: float) -> float:
    """Million fluid-node updates per second."""
    return fluid_nodes * steps / seconds / 1e6 if seconds > 0 else 0.0


def bandwidth_fraction(
    mflups_value: float, bytes_per_node: int, peak: float | None
) -> float | None:
    """Fraction of ``peak`` (bytes/s) used at ``mflups_value`` with B bytes per node and step."""
    if not peak:
        return None
    return mflups_value * 1e6 * bytes_per_node / peak


@dataclass
class Metrics:
    """Counters of a simulation; bandwidths in bytes/s, fractions in [0, 1]."""

    steps: int = 0
    fluid_nodes: int = 0
    n_tiles: int = 0
    eta_t: float = 0.0
    mflups: float = 0.0
    mflups_mean: float = 0.0
    seconds: float = 0.0
    bytes_per_node_step: int = 0
    peak_bandwidth: float | None = None
    copy_bandwidth: float | None = None

    @property
    def bandwidth_fraction_peak(self) -> float | None:
        """Fraction of the theoretical peak bandwidth at the latest MFLUPS."""
        return bandwidth_fraction(self.mflups, self.bytes_per_node_step, self.peak_bandwidth)

    @property
    def bandwidth_fraction_copy(self) -> float | None:
        """Fraction of the measured device-to-device copy bandwidth at the latest MFLUPS."""
        return bandwidth_fraction(self.mflups, self.bytes_per_node_step, self.copy_bandwidth)

    def record(self, steps: int, seconds: float) -> None:
        """Account ``steps`` that took ``seconds``."""
        self.steps += steps
        self.seconds += seconds
        self.mflups = mflups(self.fluid_nodes, steps, seconds)
        self.mflups_mean = mflups(self.fluid_nodes, self.steps, self.seconds)

    def as_dict(self) -> dict:
        """Plain dict including the derived bandwidth fractions."""
        out = asdict(self)
        out["bandwidth_fraction_peak"] = self.bandwidth_fraction_peak
        out["bandwidth_fraction_copy"] = self.bandwidth_fraction_copy
        return out
