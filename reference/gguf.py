"""Small, self-contained GGUF v2/v3 reader and writer for the PyTorch reference (numpy only).

Format: the published GGUF specification (ggml docs/gguf.md) and the ggml block layouts
(ggml-common.h); see src/core/quant_blocks.h for the same layouts in C++.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import struct
from typing import Any, BinaryIO, Dict, Iterable, List, Optional, Tuple

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32


class GGUFError(Exception):
    """Malformed or unsupported GGUF input; the message names the field and byte offset."""


class ValueType(enum.IntEnum):
    """GGUF metadata value type ids (fixed by the format)."""
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_SCALAR_FMT = {
    ValueType.UINT8: "<B", ValueType.INT8: "<b", ValueType.UINT16: "<H",
    ValueType.INT16: "<h", ValueType.UINT32: "<I", ValueType.INT32: "<i",
    ValueType.FLOAT32: "<f", ValueType.BOOL: "<?", ValueType.UINT64: "<Q",
    ValueType.INT64: "<q", ValueType.FLOAT64: "<d",
}
_SCALAR_NP = {
    ValueType.UINT8: np.uint8, ValueType.INT8: np.int8, ValueType.UINT16: np.uint16,
    ValueType.INT16: np.int16, ValueType.UINT32: np.uint32, ValueType.INT32: np.int32,
    ValueType.FLOAT32: np.float32, ValueType.BOOL: np.bool_, ValueType.UINT64: np.uint64,
    ValueType.INT64: np.int64, ValueType.FLOAT64: np.float64,
}


class GgmlType(enum.IntEnum):
    """ggml tensor type ids as stored in GGUF tensor infos."""
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    BF16 = 30


# (elements per block, bytes per block)
BLOCK_LAYOUT = {
    GgmlType.F32: (1, 4), GgmlType.F16: (1, 2), GgmlType.BF16: (1, 2),
    GgmlType.F64: (1, 8), GgmlType.I8: (1, 1), GgmlType.I16: (1, 2),
    GgmlType.I32: (1, 4), GgmlType.I64: (1, 8),
    GgmlType.Q4_0: (32, 18), GgmlType.Q4_1: (32, 20), GgmlType.Q5_0: (32, 22),
    GgmlType.Q5_1: (32, 24), GgmlType.Q8_0: (32, 34), GgmlType.Q8_1: (32, 36),
    GgmlType.Q2_K: (256, 84), GgmlType.Q3_K: (256, 110), GgmlType.Q4_K: (256, 144),
    GgmlType.Q5_K: (256, 176), GgmlType.Q6_K: (256, 210), GgmlType.Q8_K: (256, 292),
}


@dataclasses.dataclass
class TensorInfo:
    """One tensor: `ne` in ggml order (ne[0] contiguous); `offset` relative to the data section."""
    name: str
    type: GgmlType
    ne: Tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def shape(self) -> Tuple[int, ...]:
        """numpy shape (row-major): reversed ne, e.g. a {n_in, n_out} weight is [n_out, n_in]."""
        return tuple(reversed(self.ne))


def tensor_nbytes(gtype: GgmlType, ne: Iterable[int]) -> int:
    """Bytes of a tensor; raises GGUFError if ne[0] is not a multiple of the block size."""
    ne = list(ne)
    block, size = BLOCK_LAYOUT[gtype]
    if ne and ne[0] % block != 0:
        raise GGUFError(f"row length {ne[0]} is not a multiple of the {gtype.name} block size {block}")
    n = 1
    for d in ne:
        n *= d
    return n // block * size


class _Cursor:
    """Bounds-checked little-endian reader over a memory map."""

    def __init__(self, buf: np.ndarray, path: str):
        self.buf = buf
        self.pos = 0
        self.path = path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path}: truncated while reading {what} at byte {self.pos}: "
                            f"need {n} bytes, file has {len(self.buf) - self.pos} left")
        b = self.buf[self.pos:self.pos + n].tobytes()
        self.pos += n
        return b

    def scalar(self, vt: ValueType, what: str):
        fmt = _SCALAR_FMT[vt]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.scalar(ValueType.UINT64, what + " length")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{self.path}: {what} at byte {self.pos - n} is not UTF-8 ({e})") from e


class GGUFReader:
    """Reads a GGUF v2/v3 file through np.memmap.

    Attributes: `version`, `alignment`, `data_offset`, `metadata` (key -> python value; numeric
    arrays become numpy arrays, string arrays lists of str), `types` (key -> ValueType, arrays
    as (ARRAY, element type)), `tensors` (name -> TensorInfo, file order).
    Raises GGUFError on malformed input (naming field and byte offset).
    """

    def __init__(self, path: str):
        self.path = str(path)
        if os.path.getsize(self.path) < 24:
            raise GGUFError(f"{self.path}: {os.path.getsize(self.path)} bytes, too short for a GGUF header (24)")
        self.buf = np.memmap(self.path, dtype=np.uint8, mode="r")
        size = len(self.buf)
        cur = _Cursor(self.buf, self.path)
        magic = cur.take(4, "magic")
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: bad magic {magic!r} at byte 0 (expected b'GGUF'); not a GGUF file")
        self.version = cur.scalar(ValueType.UINT32, "version")
        if self.version not in (2, 3):
            raise GGUFError(f"{self.path}: GGUF version {self.version} unsupported (expected 2 or 3)")
        n_tensors = cur.scalar(ValueType.UINT64, "tensor_count")
        n_kv = cur.scalar(ValueType.UINT64, "metadata_kv_count")
        # Each entry needs at least 8+4 (kv) or 8+4+8+4+8 bytes: reject impossible counts early.
        if n_kv * 12 > size or n_tensors * 24 > size:
            raise GGUFError(f"{self.path}: counts (tensors {n_tensors}, kv {n_kv}) exceed file size {size}")
        self.metadata: Dict[str, Any] = {}
        self.types: Dict[str, Any] = {}
        for i in range(n_kv):
            at = cur.pos
            key = cur.string(f"metadata key #{i}")
            vt_raw = cur.scalar(ValueType.UINT32, f"type of {key!r}")
            try:
                vt = ValueType(vt_raw)
            except ValueError:
                raise GGUFError(f"{self.path}: metadata {key!r} at byte {at} has unknown type {vt_raw}") from None
            if key in self.metadata:
                raise GGUFError(f"{self.path}: duplicate metadata key {key!r} at byte {at}")
            value, tinfo = self._read_value(cur, vt, key, depth=0)
            self.metadata[key] = value
            self.types[key] = tinfo
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise GGUFError(f"{self.path}: general.alignment {self.alignment} is not a power of two")
        self.tensors: Dict[str, TensorInfo] = {}
        for i in range(n_tensors):
            at = cur.pos
            name = cur.string(f"tensor #{i} name")
            n_dims = cur.scalar(ValueType.UINT32, f"n_dims of {name!r}")
            if not 1 <= n_dims <= 4:
                raise GGUFError(f"{self.path}: tensor {name!r} at byte {at}: n_dims {n_dims} not in 1..4")
            ne = tuple(cur.scalar(ValueType.UINT64, f"ne of {name!r}") for _ in range(n_dims))
            t_raw = cur.scalar(ValueType.UINT32, f"type of {name!r}")
            try:
                gtype = GgmlType(t_raw)
            except ValueError:
                raise GGUFError(f"{self.path}: tensor {name!r} at byte {at}: unknown ggml type {t_raw}") from None
            offset = cur.scalar(ValueType.UINT64, f"offset of {name!r}")
            if name in self.tensors:
                raise GGUFError(f"{self.path}: duplicate tensor {name!r} at byte {at}")
            if offset % self.alignment:
                raise GGUFError(f"{self.path}: tensor {name!r} offset {offset} not aligned to {self.alignment}")
            self.tensors[name] = TensorInfo(name, gtype, ne, offset, tensor_nbytes(gtype, ne))
        self.data_offset = (cur.pos + self.alignment - 1) // self.alignment * self.alignment
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        prev_end, prev_name = 0, None
        for start, end, name in spans:
            if self.data_offset + end > size:
                raise GGUFError(f"{self.path}: tensor {name!r} [{start}, {end}) of the data section "
                                f"(starts at byte {self.data_offset}) runs past the file end {size}")
            if start < prev_end:
                raise GGUFError(f"{self.path}: tensors {prev_name!r} and {name!r} overlap at data offset {start}")
            prev_end, prev_name = end, name

    def _read_value(self, cur: _Cursor, vt: ValueType, key: str, depth: int):
        if vt == ValueType.STRING:
            return cur.string(f"value of {key!r}"), vt
        if vt == ValueType.ARRAY:
            if depth > 8:
                raise GGUFError(f"{self.path}: metadata {key!r} nests arrays deeper than 8 levels")
            et_raw = cur.scalar(ValueType.UINT32, f"array type of {key!r}")
            try:
                et = ValueType(et_raw)
            except ValueError:
                raise GGUFError(f"{self.path}: array {key!r} has unknown element type {et_raw}") from None
            n = cur.scalar(ValueType.UINT64, f"array length of {key!r}")
            if n > len(self.buf) - cur.pos:
                raise GGUFError(f"{self.path}: array {key!r} length {n} exceeds the remaining file size")
            if et in _SCALAR_NP:
                dt = np.dtype(_SCALAR_NP[et]).newbyteorder("<")
                raw = cur.take(n * dt.itemsize, f"array {key!r}")
                return np.frombuffer(raw, dtype=dt).copy(), (vt, et)
            items, sub = [], None
            for _ in range(n):
                v, sub = self._read_value(cur, et, key, depth + 1)
                items.append(v)
            return items, (vt, sub if et == ValueType.ARRAY else et)
        return cur.scalar(vt, f"value of {key!r}"), vt

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    def raw(self, name: str) -> np.ndarray:
        """Raw bytes of a tensor (uint8 view into the map)."""
        if name not in self.tensors:
            raise GGUFError(f"{self.path}: tensor {name!r} not found")
        t = self.tensors[name]
        start = self.data_offset + t.offset
        return self.buf[start:start + t.nbytes]

    def tensor(self, name: str) -> np.ndarray:
        """Tensor `name` dequantized to float32, numpy shape = reversed ggml ne."""
        t = self.tensors.get(name)
        if t is None:
            raise GGUFError(f"{self.path}: tensor {name!r} not found")
        return dequantize(self.raw(name), t.type, t.n_elements).reshape(t.shape)


# ----------------------------------------------------------------------------------------------
# Dequantization (vectorized numpy; formulas from ggml-common.h block definitions).

def _f16(raw: np.ndarray) -> np.ndarray:
    """IEEE half values from bytes: a flat byte array, or [nb, 2] block columns -> [nb]."""
    v = np.ascontiguousarray(raw).view("<f2").astype(np.float32)
    return v[:, 0] if v.ndim == 2 else v


def _blocks(raw: np.ndarray, gtype: GgmlType, n: int) -> np.ndarray:
    block, size = BLOCK_LAYOUT[gtype]
    if n % block:
        raise GGUFError(f"{gtype.name}: element count {n} not a multiple of block size {block}")
    nb = n // block
    if raw.size < nb * size:
        raise GGUFError(f"{gtype.name}: {raw.size} bytes for {n} elements, need {nb * size}")
    return np.asarray(raw[:nb * size]).reshape(nb, size)


def _scale_min_k4(sc: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Unpacks the 12-byte 6-bit scales/mins of Q4_K/Q5_K into [nb, 8] arrays."""
    sc = sc.astype(np.uint8)
    d = np.empty(sc.shape[:-1] + (8,), np.uint8)
    m = np.empty_like(d)
    d[..., :4] = sc[..., 0:4] & 63
    m[..., :4] = sc[..., 4:8] & 63
    d[..., 4:] = (sc[..., 8:12] & 0xF) | ((sc[..., 0:4] >> 6) << 4)
    m[..., 4:] = (sc[..., 8:12] >> 4) | ((sc[..., 4:8] >> 6) << 4)
    return d.astype(np.float32), m.astype(np.float32)


def dequantize(raw: np.ndarray, gtype: GgmlType, n: int) -> np.ndarray:
    """Dequantizes `n` elements of `gtype` from raw bytes to a flat float32 array.

    Raises GGUFError for unsupported types or too few bytes.
    """
    raw = np.asarray(raw, dtype=np.uint8)
    if gtype == GgmlType.F32:
        return raw[:4 * n].copy().view("<f4").astype(np.float32)
    if gtype == GgmlType.F16:
        return _f16(raw[:2 * n])
    if gtype == GgmlType.BF16:
        u = raw[:2 * n].copy().view("<u2").astype(np.uint32) << 16
        return u.view(np.float32)
    if gtype == GgmlType.F64:
        return raw[:8 * n].copy().view("<f8").astype(np.float32)
    b = _blocks(raw, gtype, n)
    nb = b.shape[0]
    if gtype == GgmlType.Q8_0:
        d = _f16(b[:, 0:2])
        q = b[:, 2:34].view(np.int8).astype(np.float32)
        return (d[:, None] * q).reshape(-1)
    if gtype in (GgmlType.Q4_0, GgmlType.Q4_1):
        d = _f16(b[:, 0:2])
        off = 2 if gtype == GgmlType.Q4_0 else 4
        qs = b[:, off:off + 16]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float32)
        if gtype == GgmlType.Q4_0:
            return (d[:, None] * (q - 8)).reshape(-1)
        return (d[:, None] * q + _f16(b[:, 2:4])[:, None]).reshape(-1)
    if gtype in (GgmlType.Q5_0, GgmlType.Q5_1):
        d = _f16(b[:, 0:2])
        off = 2 if gtype == GgmlType.Q5_0 else 4
        qh = b[:, off:off + 4].copy().view("<u4").reshape(nb).astype(np.uint64)
        qs = b[:, off + 4:off + 20]
        bits = ((qh[:, None] >> np.arange(32, dtype=np.uint64)) & 1).astype(np.uint8)
        q = (np.concatenate([qs & 0xF, qs >> 4], axis=1) | (bits << 4)).astype(np.float32)
        if gtype == GgmlType.Q5_0:
            return (d[:, None] * (q - 16)).reshape(-1)
        return (d[:, None] * q + _f16(b[:, 2:4])[:, None]).reshape(-1)
    if gtype in (GgmlType.Q4_K, GgmlType.Q5_K):
        d = _f16(b[:, 0:2])
        dmin = _f16(b[:, 2:4])
        sc, mn = _scale_min_k4(b[:, 4:16])
        if gtype == GgmlType.Q4_K:
            qs = b[:, 16:144].reshape(nb, 4, 32)
            qh = None
        else:
            qh = b[:, 16:48]
            qs = b[:, 48:176].reshape(nb, 4, 32)
        # Chunk j of 64 elements: sub-block 2j from low nibbles, 2j+1 from high nibbles.
        q = np.stack([qs & 0xF, qs >> 4], axis=2).astype(np.float32)  # [nb, 4, 2, 32]
        if qh is not None:
            shift = (2 * np.arange(4)[:, None] + np.arange(2)[None, :]).astype(np.uint8)  # [4, 2]
            hb = (qh[:, None, None, :] >> shift[None, :, :, None]) & 1
            q = q + 16 * hb.astype(np.float32)
        q = q.reshape(nb, 8, 32)
        return (d[:, None, None] * sc[:, :, None] * q - dmin[:, None, None] * mn[:, :, None]).reshape(-1)
    if gtype == GgmlType.Q6_K:
        ql = b[:, 0:128].reshape(nb, 2, 64)
        qh = b[:, 128:192].reshape(nb, 2, 32)
        sc = b[:, 192:208].view(np.int8).astype(np.float32).reshape(nb, 2, 8)
        d = _f16(b[:, 208:210])
        lo = np.concatenate([ql[:, :, :32] & 0xF, ql[:, :, 32:] & 0xF,
                             ql[:, :, :32] >> 4, ql[:, :, 32:] >> 4], axis=2)  # [nb, 2, 128]
        hi = np.concatenate([(qh >> 0) & 3, (qh >> 2) & 3, (qh >> 4) & 3, (qh >> 6) & 3], axis=2)
        q = (lo | (hi << 4)).astype(np.float32) - 32
        # Element l of half h uses scale index 8h + l // 16.
        s = np.repeat(sc, 16, axis=2)
        return (d[:, None, None] * s * q).reshape(-1)
    if gtype == GgmlType.Q8_K:
        d = np.ascontiguousarray(b[:, 0:4]).view("<f4").reshape(nb)
        q = b[:, 4:260].view(np.int8).astype(np.float32)
        return (d[:, None] * q).reshape(-1)
    raise GGUFError(f"dequantize: tensor type {gtype.name} is not supported by the reference reader")


# ----------------------------------------------------------------------------------------------
# Quantization for the writer (only what export needs; round-to-nearest as ggml's reference code).

def quantize(x: np.ndarray, gtype: GgmlType) -> bytes:
    """Quantizes a flat float array to `gtype` bytes (F32, F16, BF16, Q8_0, Q4_0).

    Q8_0: d = amax/127, q = round(x/d) (ggml quantize_row_q8_0_ref). Q4_0: d = max/-8 where max
    is the signed value of largest magnitude, q = min(15, trunc(x/d + 8.5)) (quantize_row_q4_0_ref).
    """
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    if gtype == GgmlType.F32:
        return x.astype("<f4").tobytes()
    if gtype == GgmlType.F16:
        return x.astype("<f2").tobytes()
    if gtype == GgmlType.BF16:
        u = x.view(np.uint32).astype(np.uint64)
        # Round to nearest even on the dropped 16 bits (NaN not expected in weights).
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
        return u.tobytes()
    if gtype == GgmlType.Q8_0:
        b = x.reshape(-1, 32)
        amax = np.abs(b).max(axis=1)
        d = amax / 127.0
        inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0).astype(np.float32)
        v = b * inv[:, None]
        q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)  # roundf: half away from zero
        out = np.empty((b.shape[0], 34), np.uint8)
        out[:, 0:2] = d.astype("<f2").reshape(-1, 1).view(np.uint8)
        out[:, 2:] = q.view(np.uint8)
        return out.tobytes()
    if gtype == GgmlType.Q4_0:
        b = x.reshape(-1, 32)
        idx = np.abs(b).argmax(axis=1)
        mx = b[np.arange(b.shape[0]), idx]
        d = mx / -8.0
        inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0).astype(np.float32)
        q = np.minimum(15, np.trunc(b * inv[:, None] + 8.5)).astype(np.uint8)
        out = np.empty((b.shape[0], 18), np.uint8)
        out[:, 0:2] = d.astype("<f2").reshape(-1, 1).view(np.uint8)
        out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
        return out.tobytes()
    raise GGUFError(f"quantize: type {gtype.name} is not supported by the reference writer")


# ----------------------------------------------------------------------------------------------
# Writer

class GGUFWriter:
    """Writes a GGUF v3 file: add metadata and tensors, then `write(path)`.

    Metadata values carry explicit ValueTypes (`add(key, value, vtype, elem_type)`); helpers
    cover common cases. Tensors are given as numpy arrays in numpy order (shape = reversed ne)
    and the ggml type to store.
    """

    def __init__(self, alignment: int = DEFAULT_ALIGNMENT):
        self.alignment = alignment
        self.kv: List[Tuple[str, ValueType, Any, Optional[ValueType]]] = []
        self.tensors: List[Tuple[str, GgmlType, Tuple[int, ...], bytes]] = []

    def add(self, key: str, value: Any, vtype: ValueType, elem_type: Optional[ValueType] = None):
        if any(k == key for k, *_ in self.kv):
            raise GGUFError(f"duplicate metadata key {key!r}")
        self.kv.append((key, vtype, value, elem_type))

    def add_string(self, key: str, v: str): self.add(key, v, ValueType.STRING)
    def add_u32(self, key: str, v: int): self.add(key, int(v), ValueType.UINT32)
    def add_i32(self, key: str, v: int): self.add(key, int(v), ValueType.INT32)
    def add_f32(self, key: str, v: float): self.add(key, float(v), ValueType.FLOAT32)
    def add_bool(self, key: str, v: bool): self.add(key, bool(v), ValueType.BOOL)

    def add_array(self, key: str, values, elem_type: ValueType):
        self.add(key, list(values), ValueType.ARRAY, elem_type)

    def add_raw_tensor(self, name: str, gtype: GgmlType, ne: Tuple[int, ...], data: bytes):
        """Adds already-encoded tensor bytes (copied unchanged, e.g. from a GGUFReader)."""
        if len(data) != tensor_nbytes(gtype, ne):
            raise GGUFError(f"tensor {name!r}: {len(data)} bytes, expected {tensor_nbytes(gtype, ne)}")
        self.tensors.append((name, gtype, tuple(ne), bytes(data)))

    def add_tensor(self, name: str, array: np.ndarray, gtype: GgmlType):
        array = np.asarray(array, dtype=np.float32)
        ne = tuple(reversed(array.shape))
        data = quantize(array.reshape(-1), gtype)
        if len(data) != tensor_nbytes(gtype, ne):
            raise GGUFError(f"tensor {name!r}: encoded {len(data)} bytes, expected {tensor_nbytes(gtype, ne)}")
        self.tensors.append((name, gtype, ne, data))

    @staticmethod
    def _w_string(f: BinaryIO, s: str):
        b = s.encode("utf-8")
        f.write(struct.pack("<Q", len(b)))
        f.write(b)

    def _w_value(self, f: BinaryIO, vtype: ValueType, value: Any, elem_type: Optional[ValueType]):
        if vtype == ValueType.STRING:
            self._w_string(f, value)
        elif vtype == ValueType.ARRAY:
            if elem_type is None:
                raise GGUFError("array without element type")
            f.write(struct.pack("<IQ", int(elem_type), len(value)))
            for v in value:
                if elem_type == ValueType.ARRAY:
                    sub_type, sub_values = v
                    self._w_value(f, ValueType.ARRAY, sub_values, sub_type)
                else:
                    self._w_value(f, elem_type, v, None)
        else:
            f.write(struct.pack(_SCALAR_FMT[vtype], value))

    def write(self, path: str):
        """Writes the file to `path` via a temporary name, renamed at the end."""
        tmp = str(path) + ".tmp"
        with open(tmp, "wb") as f:
            f.write(GGUF_MAGIC)
            f.write(struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for key, vtype, value, et in self.kv:
                self._w_string(f, key)
                f.write(struct.pack("<I", int(vtype)))
                self._w_value(f, vtype, value, et)
            offset = 0
            offsets = []
            for name, gtype, ne, data in self.tensors:
                self._w_string(f, name)
                f.write(struct.pack("<I", len(ne)))
                for d in ne:
                    f.write(struct.pack("<Q", d))
                f.write(struct.pack("<IQ", int(gtype), offset))
                offsets.append(offset)
                offset += (len(data) + self.alignment - 1) // self.alignment * self.alignment
            pad = (-f.tell()) % self.alignment
            f.write(b"\0" * pad)
            for (name, gtype, ne, data), off in zip(self.tensors, offsets):
                f.write(data)
                f.write(b"\0" * ((-len(data)) % self.alignment))
        os.replace(tmp, path)


def copy_with_metadata(src: str, dst: str, extra: Dict[str, Tuple[Any, ValueType]]):
    """Rewrites `src` to `dst` with metadata keys `extra` ({key: (value, type)}) added after the
    existing ones (replacing a key of the same name in place); tensors are copied byte for byte."""
    r = GGUFReader(src)
    w = GGUFWriter(alignment=r.alignment)
    for key, value in r.metadata.items():
        if key in extra:
            v, vt = extra[key]
            w.add(key, v, vt)
            continue
        t = r.types[key]
        if isinstance(t, tuple):
            if t[1] == ValueType.ARRAY:
                raise GGUFError(f"copy_with_metadata: nested array {key!r} is not supported")
            vals = value.tolist() if isinstance(value, np.ndarray) else list(value)
            w.add(key, vals, ValueType.ARRAY, t[1])
        else:
            w.add(key, value, t)
    for key, (v, vt) in extra.items():
        if key not in r.metadata:
            w.add(key, v, vt)
    for name, t in r.tensors.items():
        w.add_raw_tensor(name, t.type, t.ne, r.raw(name).tobytes())
    w.write(dst)
