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

from . import collision, mrt
from .lattice import LATTICE_NAMES, MRT_ONLY
from .moments import MRT_LATTICES
from .registry import Registry

__all__ = ["CollisionModel", "COLLISION_MODELS", "COLLISIONS", "register", "collision_model",
           "options_doc"]

#: Rates of a model: (lattice name, tau, TRT magic parameter, MRT group-rate overrides) ->
#: the rates object its collide takes (lattice units).
RatesFn = Callable[[str, float, float, Mapping[str, float] | None], Any]


@dataclass(frozen=True)
class CollisionModel:
    """One collision model: name, supported lattices, rates from the config, NumPy collide.

    ``requirement`` says in a few words what the model needs of a lattice (the refusal message
    of an unsupported lattice); ``takes_mrt_rates``: whether ``SimulationConfig.mrt_rates``
    applies to it.
    """

    name: str
    lattices: tuple[str, ...]
    requirement: str
    rates_fn: RatesFn
    collide: Callable[..., Any]
    takes_mrt_rates: bool = False
    doc: str = ""

    def __reduce__(self):
        # Pickled by name (a Problem travels to MPI ranks): the registry holds the functions.
        return collision_model, (self.name,)

    def rates(self, lattice: str, tau: float, trt_magic: float = 3 / 16,
              mrt_rates: Mapping[str, float] | None = None) -> Any:
        """Relaxation rates (1 / time steps) at relaxation time ``tau`` on ``lattice``;
        ValueError for an invalid override."""
        return self.rates_fn(lattice, tau, trt_magic, mrt_rates)

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
    lambda lattice, tau, magic, _: collision.bgk_rates(tau), collision.collide,
    doc="single relaxation time"))
register(CollisionModel(
    "TRT", _ISOTROPIC, "needs an isotropic fourth velocity moment",
    lambda lattice, tau, magic, _: collision.trt_rates(tau, magic), collision.collide,
    doc="two relaxation times"))
register(CollisionModel(
    "MRT", MRT_LATTICES, "needs a moment basis",
    lambda lattice, tau, _, overrides: mrt.mrt_rates(lattice, tau, overrides), mrt.collide,
    takes_mrt_rates=True, doc=f"moment space; {', '.join(MRT_LATTICES)}"))

#: Option set of ``SimulationConfig.collision``.
COLLISIONS: tuple[str, ...] = tuple(COLLISION_MODELS)


def options_doc() -> str:
    """'A (what), B (what) or C (what)': the registered models for the config's doc string."""
    parts = [f"{m.name} ({m.doc})" for m in COLLISION_MODELS.values()]
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]
