"""The IDX file format of MNIST and its successors (LeCun et al.'s MNIST page), raw or gzipped.

A file is a 4-byte magic number, one big-endian uint32 per dimension, then the values in row-major
order. The magic's bytes are 0, 0, the value type (0x08: unsigned byte) and the number of
dimensions: 0x00000803 is a stack of images (N, rows, cols), 0x00000801 a vector of labels (N,).
Anything else, and any file whose length disagrees with its header, is refused with one line.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from ..errors import UserError

IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801
_NDIM = {IMAGES_MAGIC: 3, LABELS_MAGIC: 1}
_WHAT = {IMAGES_MAGIC: "images", LABELS_MAGIC: "labels"}
_GZIP_MAGIC = b"\x1f\x8b"


def read_idx(path: Path, magic: int) -> np.ndarray:
    """The uint8 array in `path` (IMAGES_MAGIC: (N, rows, cols); LABELS_MAGIC: (N,))."""
    buf = _bytes(path)
    ndim = _NDIM[magic]
    header = 4 + 4 * ndim
    found = int.from_bytes(buf[:4], "big") if len(buf) >= 4 else None
    if found != magic:
        shown = "a file shorter than 4 bytes" if found is None else f"magic number 0x{found:08x}"
        raise UserError(f"{path} is not an IDX {_WHAT[magic]} file ({shown}, expected 0x{magic:08x}): "
                        "it is foreign or damaged; get the dataset's files again")
    if len(buf) < header:
        raise UserError(f"{path} is truncated: its IDX header needs {header} bytes, the file has {len(buf)}")
    dims = tuple(int.from_bytes(buf[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    size = header + int(np.prod(dims, dtype=np.int64))
    if len(buf) != size:
        state = "truncated" if len(buf) < size else "longer than its header says"
        raise UserError(f"{path} is {state}: an IDX {_WHAT[magic]} file of shape {dims} has {size} bytes, "
                        f"this one {len(buf)}; get the dataset's files again")
    return np.frombuffer(buf, dtype=np.uint8, offset=header).reshape(dims).copy()  # writable, for torch


def read_pair(images_path: Path, labels_path: Path, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, rows, cols) and int64 labels (N,) of one split, checked against each other."""
    images = read_idx(images_path, IMAGES_MAGIC)
    labels = read_idx(labels_path, LABELS_MAGIC).astype(np.int64)
    if len(images) != len(labels):
        raise UserError(f"{images_path} holds {len(images)} images but {labels_path} {len(labels)} labels: "
                        "the two files are from different sets")
    if len(labels) and labels.max() >= num_classes:
        raise UserError(f"{labels_path} has label {labels.max()}, outside 0..{num_classes - 1}")
    return images, labels


def _bytes(path: Path) -> bytes:
    """The file's contents, gunzipped when it starts with gzip's magic (whatever its name says)."""
    try:
        with open(path, "rb") as f:
            buf = f.read()
        if buf[:2] == _GZIP_MAGIC:
            buf = gzip.decompress(buf)
    except (EOFError, OSError, zlib.error) as err:  # a cut-off .gz raises EOFError; bad CRC OSError
        raise UserError(f"{path} is unreadable ({type(err).__name__}: {err}): it is truncated or damaged; "
                        "get the dataset's files again") from None
    return buf
