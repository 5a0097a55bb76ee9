"""LM Studio's models folder, read in place (never copied, never written).

    <home>/models/<publisher>/<repo>/<file>.gguf      (as LM Studio's docs describe it)

The home is the folder `~/.lmstudio-home-pointer` names, else `~/.lmstudio`; a models folder chosen in LM
Studio's settings ("Models Directory": `downloadsFolder` in the home's `settings.json`) comes first; the pre-0.3
folder `~/.cache/lm-studio/models` is read too. A model is named `lmstudio:publisher/repo[:QUANT]` like a Hub repo.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelLoadError
from .names import is_model_gguf, is_split, pick_gguf, quant_of


@dataclass(frozen=True, slots=True)
class LMStudioModel:
    name: str  # "lmstudio:publisher/repo:Q4_K_M" (or ":file.gguf" when the quantization does not tell files apart)
    path: Path


def lmstudio_roots() -> list[Path]:
    home = Path.home()
    homes = []
    try:
        if pointed := (home / ".lmstudio-home-pointer").read_text().strip():
            homes.append(Path(pointed).expanduser())
    except OSError:
        pass
    homes.append(home / ".lmstudio")
    roots = [chosen for h in homes if (chosen := _chosen_folder(h)) is not None]
    roots += [h / "models" for h in homes] + [home / ".cache" / "lm-studio" / "models"]
    return [r for i, r in enumerate(roots) if r.is_dir() and r not in roots[:i]]


def _chosen_folder(lmstudio_home: Path) -> Path | None:
    """The models folder the user picked in LM Studio's settings, if any (a damaged file: none, as LM Studio)."""
    try:
        settings = json.loads((lmstudio_home / "settings.json").read_text())
    except (OSError, ValueError):
        return None
    folder = settings.get("downloadsFolder") if isinstance(settings, dict) else None
    return Path(folder).expanduser() if isinstance(folder, str) and folder.strip() else None


def _repo_files(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(folder.glob("*.gguf")) if p.is_file()}


def find_lmstudio(repo: str, tag: str | None) -> Path:
    roots = lmstudio_roots()
    for root in roots:
        folder = root / repo
        if folder.is_dir():
            name = pick_gguf(_repo_files(folder), tag, f"LM Studio's {folder}")
            if is_split(name):
                raise ModelLoadError(f"{folder / name} is one part of a split GGUF, which llmchat does not load yet")
            return folder / name
    where = ", ".join(map(str, roots)) or "~/.lmstudio/models"
    raise ModelLoadError(f"no LM Studio model {repo} in {where} (`lms get` fetches models there)")


def list_lmstudio() -> list[LMStudioModel]:
    found = []
    for root in lmstudio_roots():
        for folder in sorted(p for p in root.glob("*/*") if p.is_dir()):
            files = {n: s for n, s in _repo_files(folder).items() if is_model_gguf(n)}
            repo = folder.relative_to(root).as_posix()
            quants = [quant_of(n) for n in files]
            for name in files:
                tag = quant_of(name)
                if len(files) > 1 and (tag is None or quants.count(tag) > 1):
                    tag = name
                found.append(LMStudioModel(f"lmstudio:{repo}" + (f":{tag}" if tag else ""), folder / name))
    return found
