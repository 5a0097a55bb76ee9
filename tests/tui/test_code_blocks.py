"""tui/text/code_blocks.py: the code a copy action takes from a reply, block by block."""
from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from llmchat.tui.text.code_blocks import CodeBlock, code_blocks, strip_controls
from llmchat.core.text.sanitize import safe_text


def test_language_tags_and_exact_code():
    reply = "Here:\n\n```python\ndef f():\n\treturn 1\n```\n\nand\n\n```\nplain\n```\n"
    assert code_blocks(reply) == [CodeBlock("python", "def f():\n\treturn 1"), CodeBlock("", "plain")]
    assert code_blocks("```py title=x.py\nx = 1\n```") == [CodeBlock("py", "x = 1")]
    assert code_blocks("no code, only `inline` code") == []
    assert code_blocks("    indented code is not a fence") == []


def test_tilde_fences_and_nested_backticks():
    assert code_blocks("~~~bash\necho ```\n~~~") == [CodeBlock("bash", "echo ```")]
    outer = "````markdown\nA reply:\n```js\nlet a = `b`;\n```\n````\nafter"
    assert code_blocks(outer) == [CodeBlock("markdown", "A reply:\n```js\nlet a = `b`;\n```")]
    assert code_blocks("```\n~~~\n```") == [CodeBlock("", "~~~")]  # a tilde line does not close a backtick fence


def test_an_unclosed_fence_runs_to_the_end_of_a_streaming_reply():
    assert code_blocks("Try:\n```rust\nfn main() {\n    println!(") == [CodeBlock("rust", "fn main() {\n    println!(")]
    assert code_blocks("```rust\nfn main() {}\n") == [CodeBlock("rust", "fn main() {}")]
    assert code_blocks("```") == [CodeBlock("", "")]


def test_fences_in_lists_lose_the_list_indent_only():
    reply = "1. Run:\n\n   ```sh\n   ls\n     -l\n   ```\n2. Done"
    assert code_blocks(reply) == [CodeBlock("sh", "ls\n  -l")]


def test_control_characters_are_removed_newlines_and_tabs_kept():
    reply = "```sh\r\necho \x1b[31mred\x1b[0m\r\n\tbell\x07 del\x7f c1\x9b bidi\u202eevil\u2066\n```"
    assert code_blocks(reply) == [CodeBlock("sh", "echo [31mred[0m\n\tbell del c1 bidievil")]
    assert strip_controls("a\r\nb\x00c\x1bd\te") == "a\nbcd\te"


_REMOVED_AS_SHOWN = re.compile(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|[\u2400-\u2421]")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["```", "~~~", "````", "```py", " ", "   ", "\n", "\n", "a", "`", "\t", "- ",
                                 "\x1b", "\r", "\r\n", "\x9b", "\u202e", "\x0b"]), max_size=40))
def test_blocks_line_up_with_the_fences_on_screen(pieces):
    """The n-th block is the n-th fence of what the screen renders (safe_text of the reply), and holds its
    code less the symbols that stand for control characters there."""
    reply = "".join(pieces)
    shown = [t for t in MarkdownIt("gfm-like").parse(safe_text(reply)) if t.type == "fence"]
    blocks = code_blocks(reply)
    assert len(blocks) == len(shown)
    for block, token in zip(blocks, shown):
        content = token.content[:-1] if token.content.endswith("\n") else token.content
        assert block.code == _REMOVED_AS_SHOWN.sub("", content)
        assert all(ch in "\n\t" or ch.isprintable() for ch in block.code)
