"""One disk-tier entry: a full KV block's bytes behind a header that says exactly what they are.

    MAGIC (8 bytes) | header length (uint32, little-endian) | header (JSON, UTF-8) | payload

The header names the block's chain hash, its parent's hash, its token ids, the model fingerprint, the dtype,
the layout (version and shape) and the payload's length and CRC-32. `decode_entry` checks every one of them
against what the reader expects; anything that does not match is a `BadEntry`, never KV to use.
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass

MAGIC = b"LLMCKV\x00\x01"
LAYOUT_VERSION = 1  # bump when the payload's layout changes: older entries then read as misses
_LENGTH = struct.Struct("<I")
MAX_HEADER_BYTES = 1 << 20


class BadEntry(Exception):
    """An entry that does not verify (truncated, flipped, another model/dtype/layout, another block)."""


@dataclass(frozen=True, slots=True)
class BlockLayout:
    """What every entry of one engine holds: the model fingerprint, the KV dtype and the payload's shape
    [num_layers, 2 (K, V), block_size, num_kv_heads, head_dim]."""

    fingerprint: bytes
    dtype: str
    shape: tuple[int, ...]
    nbytes: int  # payload length


@dataclass(frozen=True, slots=True)
class BlockKey:
    """Which block a reader wants: its chain hash, its parent's hash and its token ids."""

    block_hash: bytes
    parent_hash: bytes | None
    token_ids: tuple[int, ...]


def encode_header(key: BlockKey, layout: BlockLayout, payload: memoryview) -> bytes:
    assert payload.nbytes == layout.nbytes, (payload.nbytes, layout.nbytes)
    header = json.dumps({
        "layout": LAYOUT_VERSION,
        "hash": key.block_hash.hex(),
        "parent": key.parent_hash.hex() if key.parent_hash is not None else None,
        "token_ids": list(key.token_ids),
        "fingerprint": layout.fingerprint.hex(),
        "dtype": layout.dtype,
        "shape": list(layout.shape),
        "nbytes": layout.nbytes,
        "crc32": zlib.crc32(payload),
    }, separators=(",", ":")).encode()
    return MAGIC + _LENGTH.pack(len(header)) + header


def decode_entry(data: bytes | bytearray | memoryview, key: BlockKey, layout: BlockLayout) -> memoryview:
    """The payload of an entry, after checking every field against `key` and `layout`; BadEntry otherwise."""
    view = memoryview(data)
    prefix = len(MAGIC) + _LENGTH.size
    if len(view) < prefix or bytes(view[: len(MAGIC)]) != MAGIC:
        raise BadEntry("not a KV block entry (bad magic)")
    (header_len,) = _LENGTH.unpack(view[len(MAGIC) : prefix])
    if header_len > MAX_HEADER_BYTES or len(view) < prefix + header_len:
        raise BadEntry("truncated header")
    try:
        header = json.loads(bytes(view[prefix : prefix + header_len]))
    except ValueError as e:
        raise BadEntry(f"unreadable header: {e}") from None
    if not isinstance(header, dict):
        raise BadEntry("unreadable header")
    checks = (
        ("layout", LAYOUT_VERSION),
        ("hash", key.block_hash.hex()),
        ("parent", key.parent_hash.hex() if key.parent_hash is not None else None),
        ("token_ids", list(key.token_ids)),
        ("fingerprint", layout.fingerprint.hex()),
        ("dtype", layout.dtype),
        ("shape", list(layout.shape)),
        ("nbytes", layout.nbytes),
    )
    for name, expected in checks:
        if header.get(name) != expected:
            raise BadEntry(f"{name} differs")
    payload = view[prefix + header_len :]
    if len(payload) != layout.nbytes:
        raise BadEntry(f"payload is {len(payload)} bytes, expected {layout.nbytes}")
    if zlib.crc32(payload) != header.get("crc32"):
        raise BadEntry("checksum mismatch")
    from ..engine.block_manager import hash_block  # (here: reading headers, as `llmchat rm` does, loads no torch)

    if hash_block(key.parent_hash, key.token_ids, layout.fingerprint) != key.block_hash:
        raise BadEntry("the block hash is not the chain hash of its parent and tokens")
    return payload
