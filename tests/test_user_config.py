"""The config file: its keys and the one-line complaints (unit), flags over file over defaults (through
`llmchat ask` in-process with a fake stream), and `llmchat config` through the CLI in a subprocess."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmchat.core.backends import ask as core_ask
from llmchat.core.chats.conversation import ChatSettings
from llmchat.core.user_config import ConfigError, UserConfig, config_path, load_or_default, load_user_config, parse_config
from llmchat.tui.commands import cli
from llmchat.tui.commands.config import chat_defaults, start_theme

GOOD = """\
# my llmchat
model = "~/models/x.gguf"
device = "cpu"
kv_cache_gb = 2          # an integer is fine for a number
kv_disk_gb = 0.5
kv_disk = false
temperature = 0.2
top_p = 0.9
top_k = 40
max_tokens = 64
seed = 7
theme = "nord"
"""


def write_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "llmchat-config.toml"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("LLMCHAT_CONFIG", str(path))
    return path


def test_every_key_is_read_with_its_type() -> None:
    c = parse_config(GOOD, Path("c.toml"))
    assert c == UserConfig("~/models/x.gguf", "cpu", 2.0, 0.5, False, 0.2, 0.9, 40, 64, 7, "nord")
    assert isinstance(c.kv_cache_gb, float)


def test_the_path_is_the_user_config_dir_unless_the_env_names_another(monkeypatch, tmp_path) -> None:
    import platformdirs

    monkeypatch.delenv("LLMCHAT_CONFIG")
    assert config_path() == Path(platformdirs.user_config_dir("llmchat")) / "config.toml"
    monkeypatch.setenv("LLMCHAT_CONFIG", str(tmp_path / "other.toml"))
    assert config_path() == tmp_path / "other.toml"
    assert load_user_config() == UserConfig()  # no file: nothing set, no complaint


@pytest.mark.parametrize("text, expected", [
    ("temperature = 0.2\n\ntop_k = \"x\"\n", "line 3: key 'top_k' must be an integer"),
    ("temperature = 0.2\ncolour = 1\n", "line 2: key 'colour' is unknown; the keys are model,"),
    ("# hi\n[engine]\ndevice = 'cpu'\n", "line 2: key 'engine' is unknown"),
    ("seed = true\n", "line 1: key 'seed' must be an integer"),
    ("kv_disk = 1\n", "line 1: key 'kv_disk' must be true or false"),
    ("top_p = 1.5\n", "line 1: key 'top_p' must be a number in (0, 1]"),
    ("kv_cache_gb = nan\n", "line 1: key 'kv_cache_gb' must be a positive number"),
    ("device = 'tpu'\n", "line 1: key 'device' must be cpu or cuda"),
    ("max_tokens = 0\n", "line 1: key 'max_tokens' must be a positive integer"),
    ("threads = 0\n", "line 1: key 'threads' must be a whole number of threads >= 1"),
    ("threads = 1.5\n", "line 1: key 'threads' must be a whole number of threads >= 1"),
    ("temperature = \n", "not valid TOML: Invalid value (at line 1, column"),
])
def test_a_malformed_file_is_one_line_naming_the_line_and_key(tmp_path, text, expected) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_user_config(path)
    message = str(e.value)
    assert expected in message and message.startswith(str(path)) and "\n" not in message
    config, problem = load_or_default(path)  # nothing of a bad file is applied
    assert config == UserConfig() and problem == message


class FakeStream:
    metrics = None
    model_line = ""  # what an AskStream says it loaded

    def __iter__(self):
        yield "ok"


def ask_params(monkeypatch: pytest.MonkeyPatch, *flags: str) -> tuple[int, dict]:
    """Run `llmchat ask hi FLAGS` in-process; what the engine would have been asked."""
    seen: dict = {}

    def fake_ask_stream(question, params, **kwargs):
        seen.update(params=params, **kwargs)
        return FakeStream()

    monkeypatch.setattr(core_ask, "ask_stream", fake_ask_stream)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    return cli.main(["ask", "hi", *flags]), seen


def test_flags_override_the_file_and_the_file_overrides_the_defaults(tmp_path, monkeypatch) -> None:
    rc, seen = ask_params(monkeypatch)  # no file: the built-in defaults
    p = seen["params"]
    assert rc == 0 and (p.temperature, p.top_p, p.top_k, p.max_tokens, p.seed) == (0.7, 1.0, 0, 512, None)
    assert seen["model"] is None and seen["device"] is None and seen["kv_disk_bytes"] == 4_000_000_000

    write_config(tmp_path, monkeypatch, "temperature = 0.2\ntop_k = 40\nseed = 7\nmax_tokens = 64\n"
                                        "device = 'cpu'\nmodel = 'm.gguf'\nkv_disk_gb = 0.5\n")
    rc, seen = ask_params(monkeypatch)
    p = seen["params"]
    assert rc == 0 and (p.temperature, p.top_p, p.top_k, p.max_tokens, p.seed) == (0.2, 1.0, 40, 64, 7)
    assert seen["model"] == "m.gguf" and seen["device"] == "cpu" and seen["kv_disk_bytes"] == 500_000_000

    rc, seen = ask_params(monkeypatch, "--temperature", "0", "--top-k", "0", "--model", "other.gguf",
                          "--kv-disk-gb", "2")
    p = seen["params"]
    assert (p.temperature, p.top_k, p.max_tokens) == (0.0, 0, 64)  # given flags win; the rest still from the file
    assert seen["model"] == "other.gguf" and seen["kv_disk_bytes"] == 2_000_000_000

    write_config(tmp_path, monkeypatch, "kv_disk = false\n")
    assert ask_params(monkeypatch)[1]["kv_disk_bytes"] == 0


def test_threads_come_from_the_flag_then_the_file_then_auto(tmp_path, monkeypatch, capsys) -> None:
    assert ask_params(monkeypatch)[1]["num_threads"] is None  # auto
    write_config(tmp_path, monkeypatch, "threads = 3\n")
    assert ask_params(monkeypatch)[1]["num_threads"] == 3
    assert ask_params(monkeypatch, "--threads", "1")[1]["num_threads"] == 1
    rc, seen = ask_params(monkeypatch, "--threads", "0")
    assert rc == 2 and seen == {}
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["llmchat: --threads must be at least 1, got 0"]
    args = cli.build_parser().parse_args(["bench", "--threads", "2"])
    assert cli.engine_config(args).num_threads == 2
    assert cli.engine_config(cli.build_parser().parse_args([])).num_threads is None


def test_a_malformed_file_is_one_line_and_ask_runs_on_the_defaults(tmp_path, monkeypatch, capsys) -> None:
    write_config(tmp_path, monkeypatch, "temperature = 0.2\ntop_k = -1\n")
    rc, seen = ask_params(monkeypatch)
    assert rc == 0 and seen["params"].temperature == 0.7 and seen["params"].top_k == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2: key 'top_k'" in err[0] and "going on with the defaults" in err[0]


def test_new_chats_take_the_files_sampling_defaults_and_an_unknown_theme_is_said() -> None:
    base = ChatSettings("be brief", 0.9, 0.8, 100)
    assert chat_defaults(None, base) == base and chat_defaults(None, base) is not base
    assert chat_defaults(UserConfig(temperature=0.1, max_tokens=64), base) == ChatSettings("be brief", 0.1, 0.8, 64)
    assert start_theme(UserConfig(theme="nord"), {"nord", "textual-dark"}, "textual-dark") == ("nord", None)
    assert start_theme(UserConfig(), {"nord"}, "textual-dark") == ("textual-dark", None)
    theme, problem = start_theme(UserConfig(theme="neon"), {"nord", "textual-dark"}, "textual-dark")
    assert theme == "textual-dark" and "'neon' is unknown" in problem and "nord, textual-dark" in problem


def run_llmchat(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", *argv], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120)


def test_llmchat_config_prints_the_path_and_the_effective_settings(tmp_path, monkeypatch) -> None:
    path = write_config(tmp_path, monkeypatch, GOOD)
    done = run_llmchat("config")
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == f"config file: {path} (found)"
    rows = {line.split()[0]: line.split("=", 1)[1].split() for line in lines[1:]}
    assert rows["temperature"] == ["0.2", "(file)"] and rows["top_k"] == ["40", "(file)"]
    assert rows["kv_disk"] == ["false", "(file)"] and rows["theme"] == ['"nord"', "(file)"]
    assert rows["threads"][-1] == "(default)" and "auto" in rows["threads"][0]
    done = run_llmchat("--kv-cache-gb", "3", "config")  # a flag given before the command shows as the flag's
    assert "kv_cache_gb  = 3 " in done.stdout and "(flag)" in done.stdout

    path.unlink()
    done = run_llmchat("config")
    assert done.returncode == 0 and "(not there; built-in defaults)" in done.stdout
    assert "temperature  = 0.7" in done.stdout and "(default)" in done.stdout
    path.write_text("threads = 1\n")
    assert "threads      = 1 " in run_llmchat("config").stdout


def test_llmchat_config_on_a_malformed_file_exits_2_with_one_line(tmp_path, monkeypatch) -> None:
    write_config(tmp_path, monkeypatch, "temperature = 0.2\nfoo = 1\n")
    done = run_llmchat("config")
    assert done.returncode == 2
    assert "(malformed, ignored)" in done.stdout and "temperature  = 0.7" in done.stdout  # the defaults apply
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "line 2: key 'foo' is unknown" in err[0]
