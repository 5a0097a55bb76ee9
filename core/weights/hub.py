"""Models from the Hugging Face Hub, through `huggingface_hub` (resumable downloads, the shared HF cache, HF_TOKEN,
HF_ENDPOINT, HF_HUB_OFFLINE), into the Hub's own cache so other apps find them too.

`hub_model` returns the local path of `org/repo[:QUANT]`: the GGUF the tag names (or the repo's only one), or
the snapshot folder of a safetensors repo. Using a model looks in the cache first and reaches the network only
when it is not there; `pull=True` (`llmchat pull`) always asks the Hub, so a newer revision is fetched. The
environment is read at each call (the library reads it at import), so the tests can point HF_ENDPOINT at a
local server. What llmchat pulled is recorded (`pulled.json` in llmchat's cache): `llmchat rm` removes only that.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

from .errors import ModelLoadError
from .names import is_split, pick_gguf
from .owned import record_pulled

Progress = Callable[[str], None]
HF_FOLDER_PATTERNS = ["*.json", "*.safetensors", "tokenizer.model", "*.txt", "*.jinja"]


def hf_cache_dir() -> Path:
    """The Hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub (~/.cache/...)."""
    if explicit := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE, as huggingface_hub reads them) set: the cache only."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def _endpoint() -> str | None:
    return (os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None


def repo_folder(repo: str) -> Path:
    return hf_cache_dir() / f"models--{repo.replace('/', '--')}"


def cached_files(repo: str) -> tuple[Path, dict[str, int]] | None:
    """The snapshot of `repo`'s main ref in the cache and its files (path in repo -> size), if it has one."""
    folder = repo_folder(repo)
    try:
        commit = (folder / "refs" / "main").read_text().strip()
    except OSError:
        snapshots = sorted((folder / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
        if not snapshots:
            return None
        commit = snapshots[-1].name
    snapshot = folder / "snapshots" / commit
    if not snapshot.is_dir():
        return None
    files = {}
    for path in snapshot.rglob("*"):
        if path.is_file():  # (follows the symlink into blobs/: a dangling one is skipped)
            files[path.relative_to(snapshot).as_posix()] = path.stat().st_size
    return snapshot, files


def _remote_files(api: Any, repo: str) -> dict[str, int]:
    """The repo's files with their sizes: one request (model_info with blobs), which a down network fails at once
    (list_repo_tree would retry with backoff for about 20 s)."""
    info = api.model_info(repo, files_metadata=True)
    return {s.rfilename: s.size or 0 for s in info.siblings or []}


def _error(e: Exception, repo: str) -> ModelLoadError:
    """One line for what huggingface_hub raised."""
    from huggingface_hub import errors
    import httpx2  # (huggingface_hub's HTTP client)

    if isinstance(e, errors.GatedRepoError):
        return ModelLoadError(f"{repo} is gated on the Hub: accept its terms on its page, then set HF_TOKEN")
    if isinstance(e, errors.RepositoryNotFoundError):
        return ModelLoadError(f"no model {repo} on the Hub (or it is private: set HF_TOKEN)")
    if isinstance(e, errors.RevisionNotFoundError | errors.RemoteEntryNotFoundError):
        return ModelLoadError(f"{repo}: {str(e).splitlines()[0]}")
    if isinstance(e, errors.OfflineModeIsEnabled | errors.LocalEntryNotFoundError):
        return ModelLoadError(f"{repo} is not in the Hugging Face cache ({hf_cache_dir()}) and the Hub cannot be "
                              "reached" + (" (HF_HUB_OFFLINE is set)" if offline() else "") +
                              ": connect, then `llmchat pull " + repo + "`")
    if isinstance(e, httpx2.HTTPError | errors.HfHubHTTPError | OSError):
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return ModelLoadError(f"could not fetch {repo} from the Hub ({first}); `llmchat pull {repo}` resumes "
                              "where it stopped" if not isinstance(e, OSError) or e.errno is None else
                              f"could not write {repo} into {hf_cache_dir()} ({first}): free some space or set "
                              "HF_HUB_CACHE")
    return ModelLoadError(f"could not fetch {repo} from the Hub ({type(e).__name__}: {e})")


def _line_progress(progress: Progress, label: str) -> type:
    """A tqdm class that reports every 10% as a plain line (for logs and pipes)."""
    from tqdm.auto import tqdm

    class LineProgress(tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self._seen, self._said = 0, -1
            self._label = label

        def update(self, n: float | None = 1) -> bool | None:
            self._seen += int(n or 0)
            if self.total:
                tenth = min(10, self._seen * 10 // int(self.total))
                if tenth > self._said:
                    self._said = tenth
                    progress(f"{self._label}: {self._seen / 1e6:,.1f} of {self.total / 1e6:,.1f} MB ({tenth * 10}%)")
            return None

    return LineProgress


def _tqdm_class(progress: Progress | None, label: str) -> type | None:
    """A terminal keeps huggingface_hub's own bars; anything else gets plain lines through `progress`."""
    return None if progress is None or sys.stderr.isatty() else _line_progress(progress, label)


def hub_model(repo: str, tag: str | None, progress: Progress | None = None, pull: bool = False) -> Path:
    """The local path of `repo[:tag]` (GGUF file or Hugging Face folder), fetched into the HF cache if needed."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download

    say = progress or (lambda line: None)
    where = f"{repo} on the Hub"
    if not pull or offline():
        try:
            return cached_model(repo, tag)
        except ModelLoadError as e:
            if offline():
                raise ModelLoadError(f"{e}; HF_HUB_OFFLINE is set: unset it and `llmchat pull {repo}"
                                     f"{':' + tag if tag else ''}`") from None
    api = HfApi(endpoint=_endpoint())
    try:
        files = _remote_files(api, repo)
        ggufs = [n for n in files if n.endswith(".gguf")]
        if ggufs or tag is not None:
            name = pick_gguf(files, tag, where)
            _check_whole(Path(name), name)
            say(f"fetching {name} from {repo} ({files[name] / 1e6:,.0f} MB) into {hf_cache_dir()}")
            path = Path(hf_hub_download(repo, name, cache_dir=hf_cache_dir(), endpoint=_endpoint(),
                                        tqdm_class=_tqdm_class(progress, name)))
            record_pulled(repo, [name])
        elif any(n.endswith(".safetensors") for n in files):
            total = sum(s for n, s in files.items() if n.endswith(".safetensors"))
            say(f"fetching {repo} (safetensors, {total / 1e6:,.0f} MB) into {hf_cache_dir()}")
            path = Path(snapshot_download(repo, cache_dir=hf_cache_dir(), endpoint=_endpoint(),
                                          allow_patterns=HF_FOLDER_PATTERNS, tqdm_class=_tqdm_class(progress, repo)))
            record_pulled(repo, sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()))
        else:
            raise ModelLoadError(f"{where} has neither a GGUF file nor safetensors weights")
    except ModelLoadError:
        raise
    except Exception as e:  # huggingface_hub's errors, the network's, the disk's
        raise _error(e, repo) from e
    say(f"saved {path}")
    return path


def cached_model(repo: str, tag: str | None) -> Path:
    """`repo[:tag]` from the HF cache, without the network; ModelLoadError when the cache lacks it."""
    cached = cached_files(repo)
    if cached is None:
        raise ModelLoadError(f"{repo} is not in the Hugging Face cache ({hf_cache_dir()})")
    snapshot, files = cached
    if any(n.endswith(".gguf") for n in files) or tag is not None:
        name = pick_gguf(files, tag, f"{repo} in the Hugging Face cache")
        return _check_whole(snapshot / name, name)
    if "config.json" in files and any(n.endswith(".safetensors") for n in files):
        return snapshot
    raise ModelLoadError(f"{repo} in the Hugging Face cache has neither a GGUF file nor safetensors weights")


def _check_whole(path: Path, name: str) -> Path:
    if is_split(name):
        raise ModelLoadError(f"{name} is one part of a split GGUF, which llmchat does not load yet: merge the parts "
                             "with llama.cpp's `llama-gguf-split --merge` and pass the merged file")
    return path
