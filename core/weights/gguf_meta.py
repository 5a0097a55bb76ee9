"""The one GGUF metadata reader: the header is bounds-checked before `gguf.GGUFReader` parses it.

`gguf.GGUFReader` trusts the counts in a file (a string array's length, the number of key/value pairs and
tensors) and builds Python objects for each element, so a small hostile file can make it allocate far
more than its size. `open_gguf` first walks the header with plain `struct` reads, checking every count and
length against fixed limits and against the file's size, and only then hands the file to the reader.
`gguf_value` is how every other module reads one metadata value.
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

from .errors import ModelLoadError

MAX_TENSORS = 1 << 16  # llama-family files hold a few hundred to a few thousand
MAX_KV_PAIRS = 1 << 16
MAX_KEY_BYTES = 1 << 12
MAX_STRING_BYTES = 1 << 24  # a chat template is a few KB; 16 MiB is generous
MAX_ARRAY_ITEMS = 1 << 22  # vocabularies and merges: up to a few hundred thousand entries
MAX_TOTAL_ITEMS = 1 << 24  # across all arrays of the file
MAX_ARRAY_DEPTH = 2
MAX_TENSOR_DIMS = 4
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type -> bytes
_STRING, _ARRAY = 8, 9


class _Scan:
    """A cursor over the header that raises ValueError on anything out of bounds."""

    def __init__(self, buf: memoryview, order: str) -> None:
        self.buf, self.order, self.pos, self.total_items = buf, order, 0, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise ValueError(f"the header ends early at byte {self.pos}")
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def skip(self, num_bytes: int, what: str) -> None:
        if num_bytes > len(self.buf) - self.pos:
            raise ValueError(f"{what} of {num_bytes} bytes runs past the end of the file")
        self.pos += num_bytes

    def string(self, limit: int, what: str) -> bytes:
        length = self.take("Q")
        if length > limit:
            raise ValueError(f"{what} is {length} bytes long (the limit is {limit})")
        start = self.pos
        self.skip(length, what)
        return bytes(self.buf[start:self.pos])

    def value(self, kind: int, key: str, depth: int = 0) -> None:
        if kind in _FIXED:
            self.skip(_FIXED[kind], f"the value of {key}")
        elif kind == _STRING:
            length = self.take("Q")
            if length > MAX_STRING_BYTES:
                raise ValueError(f"a string in {key} is {length} bytes long (the limit is {MAX_STRING_BYTES})")
            self.skip(length, f"a string in {key}")
        elif kind == _ARRAY:
            item_kind, count = self.take("I"), self.take("Q")
            self.total_items += count
            if count > MAX_ARRAY_ITEMS or self.total_items > MAX_TOTAL_ITEMS:
                raise ValueError(f"the array {key} claims {count} items (the limit is {MAX_ARRAY_ITEMS})")
            if depth >= MAX_ARRAY_DEPTH:
                raise ValueError(f"the array {key} nests deeper than {MAX_ARRAY_DEPTH} levels")
            if item_kind in _FIXED:
                self.skip(_FIXED[item_kind] * count, f"the array {key}")
            else:
                for _ in range(count):
                    self.value(item_kind, key, depth + 1)
        else:
            raise ValueError(f"unknown value type {kind} for {key}")


def check_gguf_header(buf: memoryview) -> None:
    """Raise ValueError unless every count and length in the GGUF header is within bounds and inside the file."""
    if bytes(buf[:4]) != b"GGUF":
        raise ValueError("no GGUF magic number")
    order = "<"
    scan = _Scan(buf, order)
    scan.skip(4, "the magic number")
    version = scan.take("I")
    if version & 0xFFFF == 0:  # a big-endian file, as gguf.GGUFReader detects it
        scan.order, version = ">", struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} (llmchat reads versions 2 and 3)")
    num_tensors, num_kv = scan.take("Q"), scan.take("Q")
    if num_tensors > MAX_TENSORS or num_kv > MAX_KV_PAIRS:
        raise ValueError(f"it claims {num_tensors} tensors and {num_kv} metadata keys (the limits are "
                         f"{MAX_TENSORS} and {MAX_KV_PAIRS})")
    for _ in range(num_kv):
        key = scan.string(MAX_KEY_BYTES, "a metadata key").decode("utf-8", "replace")
        scan.value(scan.take("I"), key)
    for _ in range(num_tensors):
        name = scan.string(MAX_KEY_BYTES, "a tensor name").decode("utf-8", "replace")
        num_dims = scan.take("I")
        if not 1 <= num_dims <= MAX_TENSOR_DIMS:
            raise ValueError(f"tensor {name} has {num_dims} dimensions")
        dims = [scan.take("Q") for _ in range(num_dims)]
        if any(d < 1 for d in dims) or sum(d.bit_length() for d in dims) > 40:
            raise ValueError(f"tensor {name} has the impossible shape {dims}")
        scan.skip(12, f"the type and offset of tensor {name}")


def open_gguf(path: Path) -> Any:
    """A `gguf.GGUFReader` for `path`, after `check_gguf_header` passed; ModelLoadError (one line) otherwise."""
    import gguf

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            with memoryview(mapped) as buf:
                check_gguf_header(buf)
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path} is not a valid GGUF file (truncated or corrupted: {e})") from e
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # the reader raises ValueError/IndexError/... on truncated or corrupted files
        raise ModelLoadError(f"{path} is not a valid GGUF file (truncated or corrupted: {e})") from e


def gguf_value(reader: Any, key: str, default: Any = None) -> Any:
    """The decoded value of metadata `key` (a number, string or list), or `default` when the file lacks it."""
    field = reader.fields.get(key)
    return default if field is None else field.contents()
