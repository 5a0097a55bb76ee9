"""The layer rules of core/README.md, checked: statically over the source (an AST walk) and at import time
(a fresh interpreter, then its `sys.modules`).

- core/api/ imports neither torch nor Textual, and nothing else of llmchat at run time;
- importing core/api, core/chats or the remote backend (and `ask --backend`'s path) loads neither;
- nothing in core/ imports Textual, anywhere (lazily included); `llmchat serve` loads no Textual;
- kernels/ imports nothing from core/;
- tui/ imports no engine, model or kvdisk module, and no torch, at module level (the UI paints first).
"""
from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = ("core", "tui", "kernels")  # folders at the root; import names llmchat.core, llmchat.tui, llmchat.kernels


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # absolute: "llmchat.core.engine.engine", "torch", "textual.app"
    line: int
    top_level: bool  # at module level and not under `if TYPE_CHECKING:` (runs when the module is imported)
    type_only: bool  # under `if TYPE_CHECKING:` (never runs)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["llmchat", *parts])


def source_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path) -> list[Import]:
    """Every import statement in the file, resolved to an absolute module name."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top_level: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(a.name, child.lineno, top_level, type_only) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                # `from . import x` names a submodule x: count x itself as the import
                targets = [f"{target}.{a.name}" for a in child.names] if not child.module else [target]
                found.extend(Import(t, child.lineno, top_level, type_only) for t in targets)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), False, True)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), top_level, type_only)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False, type_only)
            else:  # class bodies, try/with/if blocks at module level run at import
                visit(child, top_level, type_only)

    visit(ast.parse(path.read_text(), str(path)), True, False)
    return found


def under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(folder: str, bad: tuple[str, ...], *, top_level_only: bool = False,
               include_type_only: bool = False) -> list[str]:
    out = []
    for path in source_files(folder):
        for imp in imports_of(path):
            if imp.type_only and not include_type_only:
                continue
            if top_level_only and not imp.top_level:
                continue
            if under(imp.module, *bad):
                out.append(f"{path.relative_to(ROOT)}:{imp.line} imports {imp.module}")
    return out


def test_the_walker_resolves_relative_imports_and_tells_lazy_from_module_level():
    imports = {i.module: i for i in imports_of(ROOT / "core" / "engine" / "engine.py")}
    assert imports["llmchat.core.engine.block_manager"].top_level  # from .block_manager import ...
    assert imports["llmchat.core.api.events"].top_level  # from ..api.events import ...
    app = {i.module: i for i in imports_of(ROOT / "tui" / "app.py")}
    assert app["textual.app"].top_level
    lazy = [i for i in app.values() if not i.top_level and not i.type_only]
    assert lazy, "tui/app.py imports something inside a function (run_app's remote factory)"
    bridge = imports_of(ROOT / "tui" / "bridge.py")
    assert any(i.type_only for i in bridge) and any(under(i.module, "llmchat.core.engine") and not i.top_level
                                                     for i in bridge)


def test_every_source_folder_is_walked():
    names = {module_name(p) for top in TOP for p in source_files(top)}
    for package in ("llmchat.core.api", "llmchat.core.engine.spec", "llmchat.tui.commands", "llmchat.kernels"):
        assert package in names


def test_core_never_imports_textual():
    assert violations("core", ("textual", "llmchat.tui"), include_type_only=True) == []


def test_core_api_imports_no_torch_no_textual_and_no_other_layer_at_run_time():
    bad = ("torch", "triton", "numpy", "textual", "llmchat.tui", "llmchat.kernels")
    bad += tuple(f"llmchat.core.{p.name}" for p in (ROOT / "core").iterdir() if p.is_dir() and p.name != "api"
                 and (p / "__init__.py").exists())
    assert violations("core/api", bad) == []


def test_kernels_import_nothing_from_core_or_tui():
    assert violations("kernels", ("llmchat.core", "llmchat.tui"), include_type_only=True) == []


def test_tui_imports_no_engine_model_or_torch_at_module_level():
    bad = ("torch", "triton", "llmchat.core.engine", "llmchat.core.model", "llmchat.core.kvdisk", "llmchat.kernels")
    assert violations("tui", bad, top_level_only=True) == []


def test_the_cli_commands_import_no_textual_at_module_level():
    assert violations("tui/commands", ("textual",), top_level_only=True) == []


CORE_ORDER = ("api", "chats text weights", "model", "engine", "kvdisk", "inspect", "backends", "serve bench")
KNOWN_EXCEPTIONS = {  # (file, import): to fold, then to delete from here (issue 21, phase 2)
    ("core/engine/engine.py", "llmchat.core.kvdisk.tier"),  # the engine builds its disk tier itself
}


def test_each_core_layer_imports_only_the_layers_above_it():
    """core/README.md's order: a folder imports folders listed before it (or beside it on one line)."""
    rank = {name: i for i, line in enumerate(CORE_ORDER) for name in line.split()}
    assert set(rank) == {p.name for p in (ROOT / "core").iterdir() if (p / "__init__.py").exists()}
    found = set()
    for path in source_files("core"):
        parts = module_name(path).split(".")
        if len(parts) < 4:  # the root modules (config, user_config, passing_thread): anyone may use them
            continue
        for imp in imports_of(path):
            target = imp.module.split(".")
            if target[:2] == ["llmchat", "core"] and len(target) > 2 and target[2] in rank \
                    and target[2] != parts[2] and rank[target[2]] >= rank[parts[2]]:
                found.add((str(path.relative_to(ROOT)), imp.module))
    assert found == KNOWN_EXCEPTIONS


def loaded_after(code: str) -> dict[str, list[str]]:
    """Run `code` in a fresh interpreter; which torch/textual/transformers modules did it load?"""
    probe = (code + "\nimport json, sys\n"
             "print(json.dumps({k: sorted(m for m in sys.modules if m.split('.')[0] == k)[:3]"
             " for k in ('torch', 'textual', 'transformers')}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def submodules(package: str) -> list[str]:
    folder = ROOT.joinpath(*package.split(".")[1:])
    return sorted(module_name(p) for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("modules", [
    submodules("llmchat.core.api"),
    submodules("llmchat.core.chats"),
    ["llmchat.core.backends.remote", "llmchat.core.backends.remote_ask", "llmchat.core.backends.remote_stats"],
    ["llmchat.core.config", "llmchat.core.user_config", "llmchat.tui.commands.cli"],
    ["llmchat.tui.commands.models", "llmchat.core.weights.remove", "llmchat.core.kvdisk.owners",
     "llmchat.tui.commands.cache"],  # `llmchat rm`, `models` and `cache` read files and headers only
], ids=["api", "chats", "remote", "cli", "rm"])
def test_importing_the_contract_and_the_remote_side_loads_neither_torch_nor_textual(modules):
    assert len(modules) >= 3
    loaded = loaded_after("\n".join(f"import {m}" for m in modules))
    assert loaded == {"torch": [], "textual": [], "transformers": []}


def test_the_probe_sees_torch_when_it_is_loaded():
    assert loaded_after("import llmchat.core.engine.engine")["torch"]


def test_ask_with_a_backend_fails_on_a_closed_port_without_importing_torch_or_textual():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['llmchat', 'ask', 'hi', '--backend', 'http://127.0.0.1:{port}/v1']\n"
        "try:\n    runpy.run_module('llmchat.tui.commands.cli', run_name='__main__')\n"
        "except SystemExit as e:\n    print('exit', e.code, file=sys.stderr)\n"
    )
    loaded = loaded_after(code)
    assert loaded == {"torch": [], "textual": [], "transformers": []}


def test_everything_llmchat_serve_imports_loads_no_textual():
    """run_serve's own imports (read from its body, so the list follows the code), then the modules they load."""
    path = ROOT / "tui" / "commands" / "serve.py"
    tree = ast.parse(path.read_text())
    (run_serve,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_serve"]
    lazy = [i.module for i in imports_of(path) if not i.top_level and not i.type_only
            if run_serve.lineno <= i.line <= run_serve.end_lineno]
    assert any(under(m, "llmchat.core.serve") for m in lazy) and any(under(m, "llmchat.core.engine") for m in lazy)
    importable = [m for m in lazy if under(m, "llmchat") or m.split(".")[0] == "uvicorn"]
    code = "import importlib, llmchat.tui.commands.serve\n" + "\n".join(
        f"importlib.import_module({m!r})" for m in importable)
    loaded = loaded_after(code)
    assert loaded["textual"] == [] and loaded["torch"]  # the engine needs torch; the server needs no UI
