"""environment.yml and pyproject.toml must name the same dependencies (conda is not run in CI)."""

import re
import tomllib
from pathlib import Path

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
