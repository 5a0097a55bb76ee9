"""Every folder with Python files ships: pyproject.toml lists it, and the wheel built from the checkout holds it."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("core", "tui", "kernels")


def package_folders() -> set[str]:
    """Import names of every folder under core/, tui/, kernels/ that holds a .py file."""
    found = set()
    for top in TOP:
        for py in (ROOT / top).rglob("*.py"):
            if "__pycache__" not in py.parts:
                found.add(".".join(["llmchat", *py.parent.relative_to(ROOT).parts]))
    return found


def test_every_package_folder_has_an_init_and_is_listed_in_pyproject():
    folders = package_folders()
    assert {"llmchat.core.api", "llmchat.core.engine.spec", "llmchat.tui.commands"} <= folders
    for name in folders:
        assert (ROOT.joinpath(*name.split(".")[1:]) / "__init__.py").exists(), f"{name} has no __init__.py"
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(setuptools["packages"]) == folders
    assert set(setuptools["package-dir"]) == {f"llmchat.{top}" for top in TOP}


def test_the_script_entry_point_names_a_function_that_exists():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, func = project["scripts"]["llmchat"].partition(":")
    path = ROOT.joinpath(*module.split(".")[1:]).with_suffix(".py")
    assert f"def {func}(" in path.read_text()


def test_the_built_wheel_holds_every_package_folder_and_the_stylesheet(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for top in TOP:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
         str(src)], capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("llmchat-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in package_folders():
        folder = "/".join(package.split("."))
        sources = {p.name for p in ROOT.joinpath(*package.split(".")[1:]).glob("*.py")}
        shipped = {n.rpartition("/")[2] for n in names if n.rpartition("/")[0] == folder and n.endswith(".py")}
        assert sources == shipped, f"{package}: missing from the wheel: {sorted(sources - shipped)}"
    assert "llmchat/tui/app.tcss" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "llmchat = llmchat.tui.commands.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
