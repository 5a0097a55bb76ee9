"""The declared inspection protocol (core/api/protocol.py InspectableBackend): the in-process engine offers it,
the remote backend and the UI tests' fake do not, and tui/ asks for it with isinstance once (tui/bridge.py)
instead of probing names; screens never reach the service or the engine behind it."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

from llmchat.core.api.protocol import InspectableBackend
from llmchat.core.backends.remote import RemoteBackend
from llmchat.core.backends.service import EngineService

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent / "tui"))
from fake_backend import FakeBackend  # noqa: E402


def test_only_the_in_process_engine_is_inspectable():
    assert issubclass(EngineService, InspectableBackend)
    assert not issubclass(RemoteBackend, InspectableBackend) and not issubclass(FakeBackend, InspectableBackend)


def probes(path: Path) -> list[str]:
    """getattr/hasattr calls on a backend-ish object, and any `.engine` attribute, in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            target = ast.unparse(node.args[0]) if node.args else ""
            if any(word in target for word in ("service", "bridge", "backend", "inspect")):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
        if isinstance(node, ast.Attribute) and node.attr == "engine":
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_tui_never_probes_the_backend_by_name_nor_reaches_the_engine():
    assert [p for f in sorted((ROOT / "tui").rglob("*.py")) for p in probes(f)] == []


def test_screens_get_the_backend_only_through_the_bridge_calls():
    reach = [f"{f.name}:{n.lineno}" for f in sorted((ROOT / "tui" / "screens").rglob("*.py"))
             for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
             if isinstance(n, ast.Attribute) and n.attr == "service"]
    assert reach == []


def test_the_probe_finder_finds_probes(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("x = getattr(app.bridge.service, 'facts', None)\nok = getattr(args, 'model', None)\n"
                      "y = service.engine.tokenizer\n")
    assert probes(sample) == ["sample.py:1 getattr(app.bridge.service, 'facts', None)", "sample.py:3 service.engine"]
