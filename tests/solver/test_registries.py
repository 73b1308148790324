"""The registries of collision models, face kinds and opening kinds: one object per choice, both
backends keyed alike, the configuration's option sets derived from them, and no name (nor an
opening kind's integer link code) compared elsewhere."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from solver import boundaries, collisions, face_kinds, opening_kinds
from solver.backends.cuda import boundary as cuda_boundary
from solver.backends.cuda import collisions as cuda_collisions
from solver.backends.cuda import opening_kinds as cuda_opening_kinds
from solver.backends.cuda.kernels import KernelVariant, all_variants, kernel_source
from solver.backends.numpy_backend import NumpyBackend
from solver.config import SimulationConfig
from solver.problem import Problem

from .name_comparisons import code_comparisons, integer_names, name_comparisons

ROOT = Path(__file__).resolve().parents[2]
#: The registries and the model modules they register: the only places that may compare names.
REGISTRY_MODULES = {"solver/collisions.py", "solver/collision.py", "solver/face_kinds.py",
                    "solver/opening_kinds.py",
                    "solver/backends/cuda/collisions.py", "solver/backends/cuda/boundary.py",
                    "solver/backends/cuda/opening_kinds.py"}


def test_numpy_and_cuda_registries_have_the_same_keys() -> None:
    assert list(collisions.COLLISION_MODELS) == list(cuda_collisions.CUDA_COLLISIONS)
    assert list(face_kinds.FACE_KIND_REGISTRY) == list(cuda_boundary.CUDA_FACE_KINDS)
    assert (list(opening_kinds.OPENING_KIND_REGISTRY)
            == list(cuda_opening_kinds.CUDA_OPENING_KINDS))
    for name, kind in opening_kinds.OPENING_KIND_REGISTRY.items():
        cuda = cuda_opening_kinds.CUDA_OPENING_KINDS[name]
        rule = kind.link_rule  # the same parts on both sides: a rule, and a ramp of its value
        assert (rule is None) == (cuda.write is None)
        assert (rule is None or rule.ramp is None) == (cuda.ramp is None)


def test_option_sets_are_the_registries() -> None:
    params = SimulationConfig.param
    assert params.collision.objects == [collisions.AUTO, *collisions.COLLISION_MODELS]
    for face in ("x_min", "x_max", "y_min", "y_max", "z_min", "z_max"):
        assert params[face].objects == list(face_kinds.FACE_KIND_REGISTRY)
    assert boundaries.FACE_KINDS == face_kinds.FACE_TYPES


def test_every_model_and_lattice_it_names_generates_a_kernel() -> None:
    names = {(v.collision, v.lattice) for v in all_variants() if v.mode == "full"}
    expected = {(m.name, lat) for m in collisions.COLLISION_MODELS.values() for lat in m.lattices
                if lat in cuda_collisions.CUDA_COLLISIONS[m.name].lattices}
    assert names == expected


def _name_comparisons(source: str, label: str, names: set[str]) -> list[str]:
    """``x == 'NAME'`` / ``x in ('NAME', ...)`` where x mentions a collision or a kind."""
    return name_comparisons(source, label, names, ("collision", "kind"))


def test_no_model_or_kind_name_is_compared_outside_the_registries() -> None:
    names = (set(collisions.COLLISIONS) | set(face_kinds.FACE_TYPES)
             | set(opening_kinds.OPENING_TYPES))
    found = [hit for package in ("solver", "app", "geometries")
             for path in sorted((ROOT / package).rglob("*.py"))
             if str(path.relative_to(ROOT)) not in REGISTRY_MODULES
             for hit in _name_comparisons(path.read_text(), str(path.relative_to(ROOT)), names)]
    assert found == []


def _sources() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text()
            for package in ("solver", "app", "geometries")
            for path in sorted((ROOT / package).rglob("*.py"))}


def test_no_opening_link_code_is_compared_outside_the_registries() -> None:
    """The pass's tables hold each crossing link's kind as an integer code; only the opening
    kind registries turn it back into a kind (issue 28 item 6: the pass switched on
    VELOCITY/PRESSURE codes in five modules)."""
    codes = {opening_kinds.link_code(k.name) for k in opening_kinds.link_kinds()}
    assert codes == {0, 1, 2}
    sources = _sources()
    ints = integer_names(sources)
    found = [hit for path, text in sources.items() if path not in REGISTRY_MODULES
             for hit in code_comparisons(text, path, codes, ints[path])]
    assert found == []


def test_the_code_check_sees_a_comparison() -> None:
    codes = {0, 1, 2}
    sources = {"solver/iolets.py": "VELOCITY, PRESSURE = 0, 1\n",
               "solver/other.py": "from .iolets import PRESSURE\nok = tables.code == PRESSURE\n"}
    ints = integer_names(sources)
    assert ints["solver/other.py"] == {"PRESSURE": 1}
    assert code_comparisons(sources["solver/other.py"], "m", codes, ints["solver/other.py"])
    assert code_comparisons("ok = tables.code[links] == 1", "m", codes)
    assert code_comparisons('line = f"if (code[k] == {P}) o = fj;"', "m", codes)
    assert code_comparisons('line = "else if (code[k] == 2) o = fj;"', "m", codes)
    assert not code_comparisons("ok = exit_code == 1", "m", codes)
    assert not code_comparisons("ok = code != DEFAULT_CODE", "m", codes, {"DEFAULT_CODE": None})


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (the kernel emulator)")
def test_a_new_opening_kind_needs_only_its_registrations(monkeypatch) -> None:
    """An opening kind registered under a new name in both registries (here: the velocity
    kind's parts) gets its own link code, drives the NumPy pass exactly like the original, and
    the generated CUDA pass (run through g++) gives the NumPy pass's values, with nothing else
    edited."""
    from solver.iolets import apply_iolets

    from .iolet_emulator import emulated_pass
    from .test_iolets import noisy_state

    def register() -> None:  # after the original's pass: its cached kernel text must not serve
        velocity = opening_kinds.opening_kind("velocity")
        monkeypatch.setitem(opening_kinds.OPENING_KIND_REGISTRY, "inlet2",
                            replace(velocity, name="inlet2"))
        monkeypatch.setitem(cuda_opening_kinds.CUDA_OPENING_KINDS, "inlet2",
                            replace(cuda_opening_kinds.CUDA_OPENING_KINDS["velocity"],
                                    name="inlet2"))
        assert opening_kinds.link_code("inlet2") == 3

    runs = {}
    for name in ("velocity", "inlet2"):
        if name == "inlet2":
            register()
        sim = noisy_state({1: {"kind": name, "value": 0.02, "profile": "poiseuille"},
                           2: "pressure"}, precision="float64", ramp_steps=40)
        p, tables = sim.problem, sim.problem.iolets
        start = sim.populations().reshape(-1)
        ref = start.copy()
        flux = apply_iolets(ref, tables.addresses(p.lattice.q, p.tiling.nodes_per_tile),
                            tables, p.storage, p.lattice, p.force, p.incompressible, step=5)
        emu = start.copy()
        flux_emu = emulated_pass(p, emu, step=5)
        np.testing.assert_allclose(emu, ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(flux_emu, flux, rtol=0, atol=1e-12)
        runs[name] = (tables.code.copy(), ref, flux)
    assert set(runs["inlet2"][0]) == {3, 1} and set(runs["velocity"][0]) == {0, 1}
    np.testing.assert_array_equal(runs["inlet2"][1], runs["velocity"][1])
    np.testing.assert_array_equal(runs["inlet2"][2], runs["velocity"][2])


def test_the_name_check_sees_a_comparison() -> None:
    names = {"MRT", "velocity", "pressure"}
    assert _name_comparisons("if problem.collision == 'MRT':\n    pass\n", "m", names)
    assert _name_comparisons("ok = face.kind in ('velocity', 'pressure')", "m", names)
    assert not _name_comparisons("ok = measure in ('velocity', 'speed')", "m", names)


def test_a_new_collision_model_needs_only_its_registrations(monkeypatch) -> None:
    """A model registered under a new name in both registries runs on the NumPy backend and
    generates its kernel, with nothing else edited (here: BGK's parts under another name)."""
    bgk, cuda_bgk = collisions.collision_model("BGK"), cuda_collisions.cuda_collision("BGK")
    monkeypatch.setitem(collisions.COLLISION_MODELS, "BGK2", replace(bgk, name="BGK2"))
    monkeypatch.setitem(cuda_collisions.CUDA_COLLISIONS, "BGK2", replace(cuda_bgk, name="BGK2"))
    solid = np.zeros((8, 8), bool)
    solid[3:5, 3:5] = True
    config = SimulationConfig(lattice="D2Q9", collision="BGK", precision="float64",
                              body_force=(1e-5, 0.0, 0.0), backend="numpy")
    problem = Problem.from_config(solid, config)
    other = replace(problem, collision="BGK2")
    assert other.collision.name == "BGK2"
    backend = NumpyBackend()
    runs = []
    for p in (problem, other):
        state = backend.allocate(p)
        backend.step(state, 5)
        runs.append(backend.populations(state))
    np.testing.assert_array_equal(runs[0], runs[1])
    source = kernel_source(KernelVariant("D2Q9", "float64", "BGK2", True, "xyz", tile_edge=8))
    reference = kernel_source(KernelVariant("D2Q9", "float64", "BGK", True, "xyz", tile_edge=8))
    assert source.replace("BGK2", "BGK") == reference


def test_unknown_names_get_the_options() -> None:
    with pytest.raises(ValueError, match="use one of"):
        collisions.collision_model("SRT")
    with pytest.raises(ValueError, match="use one of"):
        face_kinds.face_kind("outlet")
    with pytest.raises(ValueError, match="Unknown collision"):
        cuda_collisions.cuda_collision("SRT")


def test_registered_objects_pickle_by_name() -> None:
    """A Problem holding its model travels to MPI ranks: models and kinds pickle by name."""
    import pickle

    for model in collisions.COLLISION_MODELS.values():
        assert pickle.loads(pickle.dumps(model)) is model
    for kind in face_kinds.FACE_KIND_REGISTRY.values():
        assert pickle.loads(pickle.dumps(kind)) is kind
