"""The registry of collision models (host side): one :class:`CollisionModel` per model.

A model is registered once here with its name, the lattices it runs on, how its relaxation rates
follow from the configuration, and its NumPy reference collide; its CUDA twin is registered
under the same name in :mod:`solver.backends.cuda.collisions` (a test keeps the two key sets
equal). The configuration's option set (:data:`COLLISIONS`), its validation, :class:`Problem`
and the backends all go through :func:`collision_model`; nothing else compares a model's name.

Adding a model: write its collide (``collide(g, lattice, rates, force, incompressible, xp)``,
the contract of :func:`solver.collision.collide`) and its rates, :func:`register` it below, and
register its CUDA code in :mod:`solver.backends.cuda.collisions`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import collision, mrt, regularized
from .lattice import LATTICE_NAMES, MRT_ONLY
from .moments import MRT_LATTICES
from .registry import Registry

__all__ = ["CollisionModel", "COLLISION_MODELS", "COLLISIONS", "register", "collision_model",
           "options_doc", "AUTO", "AUTO_TAU", "COLLISION_OPTIONS", "chosen_collision"]

#: Rates of a model: (lattice name, tau, TRT magic parameter, MRT group-rate overrides,
#: Smagorinsky constant) -> the rates object its collide takes (lattice units).
RatesFn = Callable[[str, float, float, Mapping[str, float] | None, float], Any]


@dataclass(frozen=True)
class CollisionModel:
    """One collision model: name, supported lattices, rates from the config, NumPy collide.

    ``requirement`` says in a few words what the model needs of a lattice (the refusal message
    of an unsupported lattice); ``takes_mrt_rates``: whether ``SimulationConfig.mrt_rates``
    applies to it; ``takes_smagorinsky``: whether ``SimulationConfig.smagorinsky_cs`` does.
    """

    name: str
    lattices: tuple[str, ...]
    requirement: str
    rates_fn: RatesFn
    collide: Callable[..., Any]
    takes_mrt_rates: bool = False
    doc: str = ""
    takes_smagorinsky: bool = False

    def __reduce__(self):
        # Pickled by name (a Problem travels to MPI ranks): the registry holds the functions.
        return collision_model, (self.name,)

    def rates(self, lattice: str, tau: float, trt_magic: float = 3 / 16,
              mrt_rates: Mapping[str, float] | None = None, smagorinsky: float = 0.0) -> Any:
        """Relaxation rates (1 / time steps) at relaxation time ``tau`` on ``lattice``;
        ValueError for an invalid override."""
        return self.rates_fn(lattice, tau, trt_magic, mrt_rates, smagorinsky)

    def refusal(self, lattice: str) -> str | None:
        """Why ``lattice`` cannot run this model and what to choose instead; None if it can."""
        if lattice in self.lattices:
            return None
        others = [m.name for m in COLLISION_MODELS.values() if lattice in m.lattices]
        fix = (f"set collision='{others[0]}'" if len(others) == 1
               else f"choose {' or '.join(others)}")
        return (f"{self.name} {self.requirement} and runs on {', '.join(self.lattices)}, not "
                f"{lattice}: {fix}, or another lattice.")


#: Every registered model by name, in registration order (the order of the app's options).
COLLISION_MODELS: Registry[CollisionModel] = Registry("collision model", "collision")


register = COLLISION_MODELS.register


def collision_model(name: str | CollisionModel) -> CollisionModel:
    """The registered model called ``name`` (a model is returned as is)."""
    if isinstance(name, CollisionModel):
        return name
    return COLLISION_MODELS.named(name)


#: Lattices whose fourth velocity moment is isotropic: the BGK/TRT equilibrium is right there.
_ISOTROPIC = tuple(name for name in LATTICE_NAMES if name not in MRT_ONLY)

register(CollisionModel(
    "BGK", _ISOTROPIC, "needs an isotropic fourth velocity moment",
    lambda lattice, tau, magic, *_: collision.bgk_rates(tau), collision.collide,
    doc="single relaxation time"))
register(CollisionModel(
    "TRT", _ISOTROPIC, "needs an isotropic fourth velocity moment",
    lambda lattice, tau, magic, *_: collision.trt_rates(tau, magic), collision.collide,
    doc="two relaxation times"))
register(CollisionModel(
    "MRT", MRT_LATTICES, "needs a moment basis",
    lambda lattice, tau, _, overrides, *__: mrt.mrt_rates(lattice, tau, overrides), mrt.collide,
    takes_mrt_rates=True, doc=f"moment space; {', '.join(MRT_LATTICES)}"))
register(CollisionModel(
    "RR", regularized.RR_LATTICES, "needs an isotropic fourth velocity moment",
    lambda lattice, tau, _, __, smagorinsky: regularized.rr_rates(tau, smagorinsky),
    regularized.collide, takes_smagorinsky=True,
    doc="recursive regularized, stable near tau = 1/2; optional Smagorinsky"))

#: Registered model names (the keys of both registries).
COLLISIONS: tuple[str, ...] = tuple(COLLISION_MODELS)

#: ``SimulationConfig.collision`` = 'auto': the model is chosen by :func:`chosen_collision`.
AUTO = "auto"
#: Option set of ``SimulationConfig.collision``: 'auto', then every registered model.
COLLISION_OPTIONS: tuple[str, ...] = (AUTO, *COLLISIONS)
#: Below this relaxation time, 'auto' collides a run driven through openings with RR: TRT
#: (odd rate -> 0 as tau -> 1/2) diverged there on the vessels of issue 28 (tau 0.5186 at
#: step 1500; tau 0.55 at step 700 through a coarctation), RR keeps every ghost moment reset.
#: Body-force (porous) runs stay on TRT at any tau: their permeability relies on TRT's
#: tau-independent wall position (magic parameter 3/16). The lattice choice for SI runs takes
#: AUTO_TAU itself rather than a smaller tau where the Mach number allows
#: (:data:`solver.lattice_parameters.AUTO_MACH`): RR's walls at an angle to the grid are far off.
AUTO_TAU = 0.55


def chosen_collision(name: str, tau: float, driven_by_openings: bool) -> CollisionModel:
    """The model a run collides with: ``name``, or for 'auto' RR when openings drive the flow
    and ``tau`` < :data:`AUTO_TAU`, else TRT. The one place this choice is made."""
    if name != AUTO:
        return collision_model(name)
    return collision_model("RR" if driven_by_openings and tau < AUTO_TAU else "TRT")


def options_doc() -> str:
    """'A (what), B (what) or C (what)': the registered models for the config's doc string."""
    parts = [f"{m.name} ({m.doc})" for m in COLLISION_MODELS.values()]
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]
