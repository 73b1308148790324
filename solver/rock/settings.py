"""The ``permeability:`` choices of case files and the CLI: protocol, axes, buffers, speed-up."""

from __future__ import annotations

import param

__all__ = ["PermeabilitySettings", "PROTOCOL_CHOICES", "AXIS_NAMES", "LARGE_SAMPLE_VOXELS",
           "LARGE_SAMPLE_LEVELS"]

PROTOCOL_CHOICES = ("mirrored", "pressure", "both")
AXIS_NAMES = ("x", "y", "z")
#: ``coarse_levels: 0`` (by size): mirrored runs of samples of at least this many voxels start
#: from a chain of this many levels (1/8 -> 1/4 -> 1/2), the others from one (1/2). Measured
#: on a 400³ sandstone-like image (H200, benchmarks/rock_time_to_answer/results/
#: start_levels-NVIDIA-H200-2026-11-28-400-d32de34.md, x axis): 3200 fine steps instead of
#: 4200 (work 3413 against 4514 fine-step equivalents), k -0.080 %, within the 0.1 % tolerance
#: and nearer the limit both runs were still falling to; no gain on 24³-48³ CPU samples, and
#: 200³ and 300³ keep today's single start (their k unchanged). Pressure-driven runs keep one
#: level (the chain was not measured on them).
LARGE_SAMPLE_VOXELS, LARGE_SAMPLE_LEVELS = 400**3, 3


class PermeabilitySettings(param.Parameterized):
    """How a sample's permeability is measured; lengths in voxels, k tolerance relative."""

    protocol = param.Selector(objects=list(PROTOCOL_CHOICES), default="mirrored",
                              doc="mirrored: sample + its mirror image, periodic along the flow "
                                  "axis, driven by a body force; pressure: open fluid buffer "
                                  "layers before and after, driven by a density (pressure) "
                                  "drop; both: run both and report their difference.")
    axes = param.ListSelector(default=["x"], objects=list(AXIS_NAMES),
                              doc="Flow axes to measure, one after the other (x, y, z; 'all' "
                                  "in case files and the CLI = the full diagonal k tensor).")
    buffer_layers = param.Integer(default=8, bounds=(1, None),
                                  doc="Open fluid layers before and after the sample "
                                      "(pressure protocol), voxels.")
    sides = param.Selector(objects=["wall", "periodic"], default="wall",
                           doc="Faces parallel to the flow: sealed walls (no flow out of the "
                               "sample's sides, as in a core holder) or periodic.")
    accelerate = param.Boolean(default=True,
                               doc="Reach a converged k in fewer steps: TRT with Lambda = 3/16 "
                                   "and tau = fast_tau (faster pressure diffusion; k nearly "
                                   "independent of tau), the drive keeping the pore Reynolds "
                                   "number fixed, and (coarse_start) a start from the flow of "
                                   "the sample coarsened by 2.")
    coarse_start = param.Boolean(default=True,
                                 doc="With accelerate: start from the flow of the sample "
                                     "coarsened by 2 (about 1/8 of the work per step) "
                                     "instead of from rest.")
    coarse_levels = param.Integer(default=0, bounds=(0, 4),
                                  doc="With coarse_start: how many times the sample is coarsened "
                                      "by 2 for the start. 1: one coarse run (1/8 of the work "
                                      "per step); 2 or more: the coarsest run starts from rest "
                                      "and, converged to the tolerance itself, starts the "
                                      "next finer one (a 1000³ sample: 1/8, 1/4 then 1/2 "
                                      "resolution), so the fine run starts closer "
                                      "(solver.rock.measure.start_levels). 0 (default): by "
                                      "the sample's size, 3 for mirrored runs of samples of "
                                      "400³ voxels or more, else 1.")
    start_rescale = param.Selector(
        objects=["none", "velocity", "velocity+density"], default="velocity",
        doc="With a chain of coarse start levels: at each prolongation multiply the start's "
            "velocity by s = k_last / k_previous of the chain's levels so far (the next "
            "level's k extrapolated geometrically over its coarse k; 1 with one level; "
            "clamped to [0.5, 1]), so the finer run starts near its own flow rate; "
            "velocity+density also scales the density's deviation from its mean "
            "(solver.rock.initial.StartScale). none: the plain prolongation. The default, "
            "velocity: beside the density gain it cut the 1000³ image's fine steps from 1801 "
            "to 1401 (H200, gain 1.15, k within 0.01 %); alone it changed nothing at 400³. "
            "Mirrored runs only (pressure-driven runs keep the plain start).")
    start_estimate = param.Selector(
        objects=["geometric", "richardson"], default="geometric",
        doc="With start_rescale: the next level's k from the chain's last two, k_last and "
            "k_previous: geometric, k_last² / k_previous; richardson, k converging with the "
            "grid spacing squared, k_last - (k_previous - k_last) / 4.")
    start_density_gain = param.Number(
        default=1.1, bounds=(0.5, 2.0),
        doc="With a coarse start: multiply the prolongated density's deviation from its mean "
            "by this factor at every prolongation (on top of start_rescale's), as the finer "
            "geometry holds a stronger pressure field than the coarse one "
            "(solver.rock.initial; 1: the plain prolongation). The default 1.1: on a 400³ "
            "image (H200) the fine steps fell from 3201 to 1801 and k's distance from the "
            "run continued to 1e-5 from +0.144 to +0.050 % (1.2 overshot: 2601 steps, "
            "-0.159 %); the 1000³ tensor's fine runs took 2001 steps instead of 3001; on two "
            "48³ CPU packs about 1.15 cut 2601 to 1601 and 1601 to 1401 fine steps. "
            "Mirrored runs only.")
    coarse_tolerance_factor = param.Number(default=10.0, bounds=(1.0, None),
                                           doc="A coarse start stops when k changes by less "
                                               "than this times the tolerance per 1000 steps "
                                               "(it only has to be close; the coarsest run of "
                                               "a chain stops at the tolerance).")
    # Why the default depends on the sample: with TRT (Lambda = 3/16) the steady k should not
    # depend on tau, yet measured k moved with it, the more the thinner the throats and the
    # longer the sample (its k converges more slowly). Against tau = 1 from rest (float32,
    # H100, benchmarks/rock_time_to_answer/results/time_to_answer-*): a 200³ sandstone-like image
    # (Kozeny-Carman k 0.085 voxel²) -0.18 % at 0.6 and -0.15 % at 0.7; the same grains at 400³
    # -0.49 % at 0.6, too close to the 0.5 % limit, and -0.33 % at 0.7; on the CPU a 40³ image of
    # 10-voxel grains (estimate 0.023 voxel², thin throats) +0.33 % at 0.6, +0.17 % at 0.7.
    # So 0.6 (3.9x less work at 200³) only for a short sample with wide throats, else 0.7
    # (:func:`solver.rock.protocol.choose_fast_tau`).
    fast_tau = param.Number(default=None, allow_None=True, bounds=(0.5, 2.0),
                            inclusive_bounds=(False, True),
                            doc="Relaxation time of the accelerated mirrored runs (lattice "
                                "units); unset: 0.6 for a sample of at most 256 voxels along "
                                "the flow with a Kozeny-Carman k of at least 0.05 voxel² "
                                "(wide throats), else 0.7 (k stays within 0.5 % of tau 1).")
    tolerance = param.Number(default=1e-3, bounds=(0, 1), inclusive_bounds=(False, True),
                             doc="Converged when k changes by less than this fraction per "
                                 "1000 steps (1e-3 = 0.1 %).")
    check_interval = param.Integer(default=200, bounds=(1, None),
                                   doc="Steps between k measurements.")
    max_steps = param.Integer(default=20000, bounds=(1, None),
                              doc="Step limit of each protocol run (not converged beyond).")
    pressure_start = param.Selector(
        objects=["rest", "ramp"], default="rest",
        doc="Start of the pressure-driven runs (their coarse start, with accelerate): at rest "
            "at uniform density, or from a density ramp across the sample (about 8x fewer "
            "coarse-start steps; k moved by +0.07 % and +0.14 % on 24³ and 32³ packs, the "
            "size of the runs' own convergence remainder: solver.rock.initial.pressure_ramp).")
    formation_factor = param.Boolean(default=True,
                                     doc="Also solve the electrical conduction in the pores "
                                         "along each axis: formation factor F and tortuosity "
                                         "F x porosity (solver.rock.conduction).")
    rev = param.Boolean(default=False,
                        doc="Also measure k (mirrored), porosity and F on centred sub-volumes "
                            "of 1/8, 1/4 and 1/2 of the volume along the first axis: the REV "
                            "curve (solver.rock.rev; about 0.9x the work of that axis again).")
    max_seconds = param.Number(default=0.0, bounds=(0, None),
                               doc="Wall-time limit of each protocol run, seconds; 0 = none.")

    @classmethod
    def from_mapping(cls, values: dict) -> dict:
        """``values`` with ``axes: all`` (or a single axis name) turned into an axis list."""
        values = dict(values)
        axes = values.get("axes")
        if axes == "all":
            values["axes"] = list(AXIS_NAMES)
        elif isinstance(axes, str):
            values["axes"] = [a.strip() for a in axes.split(",") if a.strip()]
        return values

    def axis_indices(self, ndim: int) -> list[int]:
        """The chosen axes as indices, checked against a geometry of ``ndim`` dimensions
        (``all``, stored as x, y, z, is every axis the geometry has: x, y of a 2D one)."""
        out = [AXIS_NAMES.index(a) for a in self.axes]
        if sorted(out) == list(range(len(AXIS_NAMES))):
            out = [a for a in out if a < ndim]
        bad = [AXIS_NAMES[a] for a in out if a >= ndim]
        if bad or not out:
            raise ValueError(f"permeability.axes {list(self.axes)} must name axes of a "
                             f"{ndim}D sample ({', '.join(AXIS_NAMES[:ndim])}).")
        return out

    def start_level_count(self, protocol: str, sample_voxels: int) -> int:
        """The coarse start levels of a ``protocol`` run on a sample of ``sample_voxels``:
        ``coarse_levels``, or with 0 :data:`LARGE_SAMPLE_LEVELS` for mirrored runs of samples
        of :data:`LARGE_SAMPLE_VOXELS` or more, else 1."""
        if self.coarse_levels:
            return int(self.coarse_levels)
        large = protocol == "mirrored" and sample_voxels >= LARGE_SAMPLE_VOXELS
        return LARGE_SAMPLE_LEVELS if large else 1

    def protocols(self) -> list[str]:
        """The protocols to run, in order."""
        return ["mirrored", "pressure"] if self.protocol == "both" else [self.protocol]
