"""What was loaded, as one line: name, architecture, parameters, weight types, context length.

A plain record (no torch) so that any backend can fill what it knows: the in-process engine computes every
field from the loaded model (core/model/model_facts.py); a remote server may know only a name and a context,
and a field it does not know stays None and is left out of the line, never guessed.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ModelFacts:
    name: str
    architecture: str | None = None  # the model type, e.g. "llama" (config.json's model_type)
    num_params: int | None = None  # elements of the tensors actually loaded; a tied embedding counted once
    weight_types: tuple[tuple[str, float], ...] = ()  # the layers' matrices: (block type or dtype, share), largest first
    embedding_type: str | None = None  # the embedding table's type (a tied embedding is the output head too)
    output_type: str | None = None  # an untied output head's type
    context_length: int | None = None  # the model's advertised context (max position embeddings)
    num_layers: int | None = None
    hidden_size: int | None = None

    def weights_text(self) -> str:
        """"Q4_1 (+Q8_0 embedding)", "Q4_K 70% · Q6_K 30%", or "float32" for a dense model."""
        if not self.weight_types:
            return ""
        if len(self.weight_types) == 1:
            text = self.weight_types[0][0]
        else:
            text = " · ".join(f"{kind} {share:.0%}" for kind, share in self.weight_types)
        kinds = {kind for kind, _ in self.weight_types}
        extras = [f"+{kind} {role}" for kind, role in ((self.embedding_type, "embedding"), (self.output_type, "output"))
                  if kind is not None and (len(kinds) > 1 or kind not in kinds)]
        return text + (f" ({', '.join(extras)})" if extras else "")

    def line(self) -> str:
        """`SmolLM2-135M-Instruct · llama · 135M params · Q4_1 (+Q8_0 embedding) · ctx 8192`; unknown parts
        are left out."""
        parts = [self.name, self.architecture or "", params_text(self.num_params), self.weights_text(),
                 f"ctx {self.context_length}" if self.context_length else ""]
        return " · ".join(p for p in parts if p)


def params_text(num_params: int | None) -> str:
    if not num_params:
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if num_params >= size:
            value = num_params / size
            return f"{value:.{0 if value >= 100 else 1}f}{unit} params".replace(".0" + unit, unit)
    return f"{num_params} params"
