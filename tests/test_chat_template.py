"""core/text/chat_template.py: the sandbox has a time and size budget; a template over it fails fast, for that render."""
from __future__ import annotations

import json
import threading
import time
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from llmchat.core.text.chat_template import ChatTemplateError, compile_chat_template, render_chat_template
from llmchat.core.weights.gguf_meta import open_gguf
from llmchat.core.weights.gguf_tokenizer import tokenizer_files_from_gguf
from llmchat.core.text.tokenizer import Tokenizer
from llmchat.core.text.prompt import prompt_ids_for

CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}{% endif %}")
MESSAGES = [{"role": "user", "content": "hi"}]

HOSTILE = {  # name: (template, what the error says)
    "10^5 x 10^5 loop, no output": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                                    "{% endfor %}", "longer than"),
    "10^5 x 10^5 loop with output": ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}"
                                     "{% endfor %}", "over its budget"),
    "loop over messages, nested": ("{% for a in range(99999) %}{% for m in messages %}{% for b in range(99999) %}"
                                   "{% endfor %}{% endfor %}{% endfor %}", "longer than"),
    "string times a billion": ("{{ 'a' * 1000000000 }}", "a * result reaches 1000000000"),
    "list times a billion": ("{{ (messages * 1000000000)|length }}", "a * result"),
    "huge power": ("{{ 10 ** 100000000 }}", "an exponent"),
    "center filter": ("{{ 'a'|center(1000000000) }}", "a number argument"),
    "ljust method": ("{{ 'a'.ljust(1000000000) }}", "a number argument"),
    "% width": ("{{ '%1000000000d' % 1 }}", "format width"),
    ".format width": ("{{ '{:1000000000}'.format(1) }}", "format width"),
    "|format width": ("{{ '%1000000000d'|format(1) }}", "format width"),
    "doubling ~ in a namespace": ("{% set ns = namespace(s='a') %}{% for i in range(64) %}"
                                  "{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "concatenation"),
    "doubling + of lists": ("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
                            "{% endfor %}", "a + result"),
    "replace with empty needle": ("{{ ('a' * 1000000)|replace('', 'bbbbbbbbbb') }}", "a replace"),
    "join of a long range": ("{{ range(100000)|join('x' * 100) }}", "a filter's result"),
    "endless recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_template_over_budget_fails_fast_with_one_line(name: str) -> None:
    source, needle = HOSTILE[name]
    template = compile_chat_template(source)
    seconds = 0.5 if needle == "longer than" else 1.5  # a size guard must fire, not the clock (a slow start once hit it)
    start = time.perf_counter()
    with pytest.raises(ChatTemplateError) as excinfo:
        render_chat_template(template, {"messages": MESSAGES}, seconds=seconds)
    elapsed = time.perf_counter() - start
    message = str(excinfo.value)
    assert needle in message and "\n" not in message and "chat template" in message
    assert elapsed < seconds + 1.5, elapsed  # nothing ran on past the budget


def test_the_default_budget_is_two_seconds_and_the_next_render_is_unaffected() -> None:
    loop = compile_chat_template(HOSTILE["10^5 x 10^5 loop, no output"][0])
    start = time.perf_counter()
    with pytest.raises(ChatTemplateError, match="longer than 2 s"):
        render_chat_template(loop, {})
    assert time.perf_counter() - start < 4.0
    assert render_chat_template(compile_chat_template(CHATML), {"messages": MESSAGES,
                                                                "add_generation_prompt": True}) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_budgets_are_per_render_and_per_thread() -> None:
    """A hostile render on one thread does not shorten a normal one running beside it."""
    loop, good = compile_chat_template(HOSTILE["10^5 x 10^5 loop, no output"][0]), compile_chat_template(CHATML)
    errors: list[Exception] = []

    def hostile() -> None:
        try:
            render_chat_template(loop, {}, seconds=1.0)
        except ChatTemplateError as e:
            errors.append(e)

    thread = threading.Thread(target=hostile)
    thread.start()
    long_chat = [{"role": "user", "content": "x" * 1000}] * 2000  # 2 MB of prompt: within the size budget
    assert len(render_chat_template(good, {"messages": long_chat})) > 2_000_000
    thread.join(5)
    assert len(errors) == 1


def test_a_real_sized_prompt_stays_well_within_budget() -> None:
    messages = [{"role": "user" if i % 2 else "assistant", "content": "word " * 200} for i in range(500)]
    start = time.perf_counter()
    text = render_chat_template(compile_chat_template(CHATML), {"messages": messages})
    assert time.perf_counter() - start < 0.5 and text.count("<|im_start|>") == 500


def test_a_tokenizer_with_a_hostile_template_refuses_that_turn(tmp_path: Path, default_gguf: Path) -> None:
    files = tokenizer_files_from_gguf(open_gguf(default_gguf))  # the real tokenizer, built in tmp_path
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(files["tokenizer.json"])
    config = json.loads(files["tokenizer_config.json"])
    config["chat_template"] = HOSTILE["10^5 x 10^5 loop, no output"][0]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = Tokenizer.from_dir(folder)
    start = time.perf_counter()
    with pytest.raises(ValueError, match="over its budget"):
        prompt_ids_for(tokenizer, MESSAGES)
    assert time.perf_counter() - start < 4.0


def test_jinja2_is_at_least_3_1_6_here_and_in_the_requirements() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert any(dep.replace(" ", "").startswith("jinja2>=3.1.6") for dep in pyproject["project"]["dependencies"])
    assert tuple(int(x) for x in version("jinja2").split(".")[:3]) >= (3, 1, 6)
    escape = '{{ "{0.__class__.__mro__}"|attr("format")(1) }}'  # the 3.1.5 bypass (CVE-2025-27516)
    with pytest.raises(ChatTemplateError, match="unsafe"):
        render_chat_template(compile_chat_template(escape), {})
