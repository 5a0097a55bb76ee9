"""A model's chat template, compiled in an immutable Jinja sandbox set up the way transformers does it, and
rendered within a time and size budget.

The sandbox stops a template from reaching Python internals; the budget stops it from hanging the thread
that renders it or exhausting memory. Every loop iteration and every call checks the clock (a check is
inserted at the top of each `{% for %}` body when the template is compiled), and every way text grows
(`~`, `+`, `*`, `%`, `.format`, filters, namespace assignments, the output itself) is bounded in size
before the result is built. A template over budget raises `ChatTemplateError` for that render only.
"""
from __future__ import annotations

import contextvars
import functools
import json
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes as nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

RENDER_SECONDS = 2.0  # a real template renders a long chat in milliseconds
RENDER_CHARS = 1 << 23  # 8 Mi characters: a 1M-token prompt is about 4 Mi
_WIDE_FORMAT = re.compile(r"\d{7,}")  # a width or precision of a million or more in a format string


class ChatTemplateError(ValueError):
    """The chat template cannot render this conversation (invalid, refused it, or over budget)."""


class TemplateRefused(ChatTemplateError):
    """The template itself refused the conversation (its `raise_exception`), e.g. "System role not supported"."""


class _OverBudget(jinja2.exceptions.SecurityError):
    pass


class _Budget:
    def __init__(self, seconds: float, chars: int) -> None:
        self.seconds, self.chars, self.deadline = seconds, chars, time.perf_counter() + seconds

    def tick(self) -> None:
        if time.perf_counter() > self.deadline:
            raise _OverBudget(f"rendering took longer than {self.seconds:g} s")

    def size(self, n: int, what: str = "a value") -> None:
        if n > self.chars:
            raise _OverBudget(f"{what} reaches {n} (the limit is {self.chars})")


_budget: contextvars.ContextVar[_Budget] = contextvars.ContextVar("chat_template_budget",
                                                                  default=_Budget(RENDER_SECONDS, RENDER_CHARS))


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else 0


def _check_args(args: Sequence[Any], kwargs: dict[str, Any], replace: bool = False) -> None:
    """Refuse arguments that would make a call or filter build something over budget (before it is built)."""
    budget = _budget.get()
    budget.tick()
    values = [*args, *kwargs.values()]
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool):
            budget.size(abs(v), "a number argument")
        budget.size(_length(v), "an argument")
    if replace and len(values) >= 3:  # s.replace(old, new): "" matches between every character
        budget.size(_length(values[0]) * max(1, _length(values[2])) // max(1, _length(values[1])), "a replace")


def _checked_filter(func: Callable[..., Any]) -> Callable[..., Any]:
    is_replace = func is jinja2.filters.FILTERS.get("replace")

    @functools.wraps(func)  # keeps jinja's pass_context / pass_eval_context marks
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        plain = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.nodes.EvalContext))]
        _check_args(plain, kwargs, replace=is_replace)
        if func is jinja2.filters.FILTERS.get("format") and plain and _WIDE_FORMAT.search(str(plain[0])):
            raise _OverBudget("a format width over a million characters")
        result = func(*args, **kwargs)
        _budget.get().size(_length(result), "a filter's result")
        return result

    return wrapper


class _TemplateNamespace(jinja2.utils.Namespace):
    """`namespace()` that refuses underscore names, so a template cannot reach Python internals through it."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # same signature trick as jinja2's Namespace
        self, attrs = args[0], dict(*args[1:], **kwargs)
        for name, value in attrs.items():
            _TemplateNamespace._check(name, value)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name, value)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any, value: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates may not set {name!r} on a namespace")
        _budget.get().size(_length(value), f"namespace value {name!r}")


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (marks assistant text for training masks): renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


class _BudgetHooks(jinja2.ext.Extension):
    """What the compiled template calls: a clock check per loop iteration, a size check per `~` concatenation."""

    def _tick(self) -> str:
        _budget.get().tick()
        return ""

    def _concat(self, *parts: Any) -> str:
        pieces = [str(p) for p in parts]
        _budget.get().size(sum(map(len, pieces)), "a ~ concatenation")
        return "".join(pieces)


class _Instrument(NodeTransformer):
    """A clock check at the top of every loop body; `a ~ b ~ c` becomes a size-checked `_concat(a, b, c)`."""

    def _hook(self, name: str, args: list[Any], lineno: int) -> nodes.Call:
        return nodes.Call(nodes.ExtensionAttribute(_BudgetHooks.identifier, name), args, [], None, None,
                          lineno=lineno)

    def visit_For(self, node: nodes.For) -> nodes.For:
        node = self.generic_visit(node)
        node.body.insert(0, nodes.ExprStmt(self._hook("_tick", [], node.lineno), lineno=node.lineno))
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Call:
        node = self.generic_visit(node)
        return self._hook("_concat", node.nodes, node.lineno)


class _BudgetedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = _Instrument().visit(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _check_args(args, kwargs, replace=getattr(__obj, "__name__", "") == "replace")
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        if getattr(method, "__name__", "") in ("format", "format_map") and _WIDE_FORMAT.search(
                str(getattr(method, "__self__", ""))):
            raise _OverBudget("a format width over a million characters")
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _budget.get()
        budget.tick()
        if operator == "+":
            budget.size(_length(left) + _length(right), "a + result")
        elif operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _length(seq) and isinstance(n, int):
                    budget.size(_length(seq) * n, "a * result")
        elif operator == "**" and isinstance(right, (int, float)) and abs(right) > 1024:
            raise _OverBudget(f"an exponent of {right}")
        elif operator == "%" and isinstance(left, str) and _WIDE_FORMAT.search(left):
            raise _OverBudget("a format width over a million characters")
        return super().call_binop(context, operator, left, right)


class _TemplateRaised(jinja2.exceptions.TemplateError):
    """The template's own `raise_exception(...)`: it refuses this conversation's shape."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def compile_chat_template(source: str) -> jinja2.Template:
    """Compile a model's chat template in the budgeted immutable sandbox, set up the way transformers does."""
    env = _BudgetedSandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, _BudgetHooks, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.filters = {name: _checked_filter(f) for name, f in env.filters.items()}
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, namespace=_TemplateNamespace)
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateError as e:
        raise ChatTemplateError(f"the model's chat template is not valid Jinja ({e}); fix the template or the "
                                "model") from e


def render_chat_template(template: jinja2.Template, variables: dict[str, Any], seconds: float = RENDER_SECONDS,
                         chars: int = RENDER_CHARS) -> str:
    """Render within `seconds` and `chars`; ChatTemplateError (one line) when the template refuses or overruns."""
    budget = _Budget(seconds, chars)
    token = _budget.set(budget)
    try:
        out: list[str] = []
        total = 0
        for chunk in template.generate(**variables):
            total += len(chunk)
            budget.size(total, "the rendered prompt")
            budget.tick()
            out.append(chunk)
        return "".join(out)
    except _OverBudget as e:
        raise ChatTemplateError(f"the chat template ran over its budget for this conversation ({e}): the model's "
                                "template loops or grows without bound; fix it or use another model") from e
    except _TemplateRaised as e:
        raise TemplateRefused(f"the chat template refused this conversation: {e}") from e
    except jinja2.exceptions.TemplateError as e:  # includes SecurityError
        raise ChatTemplateError(f"the chat template refused this conversation: {e}") from e
    except (RecursionError, MemoryError, OverflowError, ArithmeticError) as e:
        raise ChatTemplateError(f"the chat template failed on this conversation ({type(e).__name__}: {e})") from e
    finally:
        _budget.reset(token)


def plain_data(value: Any) -> Any:
    """Plain JSON data (no caller objects with methods reach the sandbox), as transformers passes it."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    return f"<{type(value).__name__}>"


def pick_template(template: Any) -> str | None:
    """The template source from tokenizer_config.json's `chat_template`: a string, or the default of a list."""
    if template is None or isinstance(template, str):
        return template
    named = {entry["name"]: entry["template"] for entry in template}  # a list of {"name", "template"}
    return named.get("default", next(iter(named.values()), None))
