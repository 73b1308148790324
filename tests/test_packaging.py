"""environment.yml and pyproject.toml must name the same dependencies (conda is not run in CI)."""

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: PyPI names whose conda-forge package is called differently.
PYPI_TO_CONDA = {"cupy-cuda12x": "cupy", "pyyaml": "pyyaml"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower()


def pyproject_names() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        names |= {_name(r) for r in extra}
    return {PYPI_TO_CONDA.get(n, n) for n in names}


def conda_names() -> set[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    names = {_name(d) for d in env["dependencies"] if isinstance(d, str)}
    return names - {"python", "pip"}


def test_environment_and_pyproject_name_the_same_dependencies():
    assert conda_names() == pyproject_names()


def test_environment_installs_the_repo_editable():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip_section


# ---------------------------------------------------------------- imports against requirements
#: Packages of this repository (imports of each other are not dependencies).
OWN_PACKAGES = ("app", "solver", "geometries")
#: Imports that only optional features need, and the extra that must declare them.
OPTIONAL_IMPORTS = {"cupy": "gpu", "cupyx": "gpu", "mpi4py": "mpi"}
#: Import name -> distribution name where the two differ and the package may be absent here.
#: (``cupyx``, CuPy's SciPy-like functions, ships in the CuPy distribution.)
IMPORT_TO_DIST = {"cupy": "cupy-cuda12x", "cupyx": "cupy-cuda12x", "yaml": "pyyaml"}


def _source_files() -> list[Path]:
    return [p for pkg in OWN_PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def third_party_imports() -> dict[str, set[str]]:
    """Top-level third-party module names imported anywhere in the packages -> files."""
    import ast
    import sys

    found: dict[str, set[str]] = {}
    for path in _source_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OWN_PACKAGES:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _distribution(module: str) -> str | None:
    from importlib.metadata import packages_distributions

    if module in IMPORT_TO_DIST:
        return IMPORT_TO_DIST[module]
    dists = packages_distributions().get(module)
    return dists[0].lower() if dists else None


def test_every_imported_package_is_a_declared_dependency():
    """`pip install .` then `panel serve app` must not fail on an undeclared import."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    missing = []
    for module, files in sorted(third_party_imports().items()):
        dist = _distribution(module)
        declared = extras[OPTIONAL_IMPORTS[module]] if module in OPTIONAL_IMPORTS else core
        if dist is None or dist.lower().replace("_", "-") not in declared:
            missing.append(f"{module} (distribution {dist}, imported by {sorted(files)[:3]})")
    assert not missing, ("imported but not declared in pyproject.toml [project] dependencies "
                         f"(or the right extra): {missing}")


def test_the_scan_sees_imports_inside_functions():
    """The scan is not fooled by lazy imports: cupy is imported inside the CuPy backend."""
    imports = third_party_imports()
    assert {"numpy", "panel", "matplotlib", "pandas"} <= set(imports)
    assert "cupy" in imports and "mpi4py" in imports


def _modules() -> list[str]:
    """Dotted names of every module of the packages (``__main__`` and scripts included)."""
    names = []
    for path in _source_files():
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def _own_module_file(path: Path, node) -> list[Path]:
    """Files of this repository a module-level ``from ... import`` in ``path`` loads."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
    elif node.module and node.module.split(".")[0] in OWN_PACKAGES:
        base = ROOT
    else:
        return []
    target = base.joinpath(*node.module.split(".")) if node.module else base
    candidates = [target.with_suffix(".py"), target / "__init__.py"]
    candidates += [target / f"{alias.name}.py" for alias in node.names]
    return [c for c in candidates if c.exists()]


def _needing_optional_imports() -> set[str]:
    """Files that import an optional package, or load (at module level) a file that does."""
    import ast

    needing = {f for m in OPTIONAL_IMPORTS for f in third_party_imports().get(m, ())}
    loads = {}
    for path in _source_files():
        tree = ast.parse(path.read_text(), str(path))
        loads[str(path.relative_to(ROOT))] = {
            str(f.relative_to(ROOT)) for node in tree.body if isinstance(node, ast.ImportFrom)
            for f in _own_module_file(path, node)}
    grown = True
    while grown:
        more = {f for f, used in loads.items() if used & needing} - needing
        needing |= more
        grown = bool(more)
    return needing


def test_a_module_loading_a_gpu_module_counts_as_needing_the_gpu_extra():
    needing = _needing_optional_imports()
    assert "solver/backends/cuda/backend.py" in needing  # imports cupy itself
    assert "solver/benchmarking/probe_backend.py" in needing  # through cuda.backend
    assert "solver/backends/plan.py" not in needing


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_module_imports_in_a_venv_of_the_declared_dependencies(tmp_path):
    """A fresh venv with `pip install .` (no extras) imports every module not needing an extra.

    Needs PyPI (CI has it); skipped where pip cannot reach an index.
    """
    import subprocess
    import venv

    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    python = str(tmp_path / "venv" / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "--quiet", str(ROOT)],
                             capture_output=True, text=True, timeout=1500)
    if install.returncode != 0 and ("NewConnectionError" in install.stderr
                                    or "No matching distribution" in install.stderr):
        pytest.skip(f"no package index reachable: {install.stderr[-300:]}")
    assert install.returncode == 0, install.stderr[-3000:]
    optional = _needing_optional_imports()
    modules = [m for m in _modules() if m.replace(".", "/") + ".py" not in optional
               and m.replace(".", "/") + "/__init__.py" not in optional and m != "app.main"]
    script = ("import importlib, sys\nfailed = []\n"
              f"for name in {modules!r}:\n"
              "    try:\n        importlib.import_module(name)\n"
              "    except Exception as exc:\n        failed.append(f'{name}: {exc!r}')\n"
              "print('\\n'.join(failed)); sys.exit(1 if failed else 0)\n")
    # Outside the checkout, so that the installed copy is what gets imported.
    result = subprocess.run([python, "-c", script], capture_output=True, text=True,
                            cwd=tmp_path, timeout=600)
    assert result.returncode == 0, f"modules failing to import:\n{result.stdout}{result.stderr}"
