"""A minimal Motion-JPEG AVI (RIFF) writer and frame reader, stdlib + Pillow only.

Why written out: the image has no OpenCV/ffmpeg bindings, yet the UFC-10 layout keeps real .avi files beside
the extracted frames. MJPEG AVI is the simplest container every player reads: each frame is one JPEG in a
`00dc` chunk of the `movi` list, with an `idx1` index at the end.
"""
import io
import struct
from pathlib import Path
from typing import List

import numpy as np

from cluster_train.shared.errors import UserError


def _chunk(fourcc: bytes, data: bytes) -> bytes:
    pad = b"\0" if len(data) % 2 else b""
    return fourcc + struct.pack("<I", len(data)) + data + pad


def _list(kind: bytes, body: bytes) -> bytes:
    return b"LIST" + struct.pack("<I", len(body) + 4) + kind + body


def encode_jpeg(frame: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def write_avi(path, frames: List[np.ndarray], fps: int = 10) -> None:
    """Write (H, W, 3) uint8 frames as an MJPEG AVI."""
    height, width = frames[0].shape[:2]
    jpegs = [encode_jpeg(f) for f in frames]
    biggest = max(len(j) for j in jpegs)
    avih = struct.pack(
        "<IIIIIIIIII4I", 1_000_000 // fps, biggest * fps, 0, 0x10, len(jpegs), 0, 1, biggest, width, height, 0, 0, 0, 0
    )
    strh = b"vidsMJPG" + struct.pack("<IHHIIIIIIIIhhhh", 0, 0, 0, 0, 1, fps, 0, len(jpegs), biggest, 0xFFFFFFFF, 0, 0,
                                     0, width, height)
    strf = struct.pack("<IiiHH4sIiiII", 40, width, height, 1, 24, b"MJPG", width * height * 3, 0, 0, 0, 0)
    hdrl = _list(b"hdrl", _chunk(b"avih", avih) + _list(b"strl", _chunk(b"strh", strh) + _chunk(b"strf", strf)))
    movi_body, index, offset = b"", b"", 4
    for jpeg in jpegs:
        chunk = _chunk(b"00dc", jpeg)
        index += b"00dc" + struct.pack("<III", 0x10, offset, len(jpeg))
        movi_body += chunk
        offset += len(chunk)
    body = b"AVI " + hdrl + _list(b"movi", movi_body) + _chunk(b"idx1", index)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


def read_avi_frames(path) -> List[np.ndarray]:
    """Decode every frame of an MJPEG AVI as (H, W, 3) uint8 arrays."""
    from PIL import Image

    data = Path(path).read_bytes()
    if data[:4] != b"RIFF" or data[8:12] != b"AVI ":
        raise UserError(f"video {path} is not a RIFF AVI file; re-extract or regenerate it")
    frames, pos = [], 12
    stack = [(12, len(data))]
    while stack:
        pos, end = stack.pop()
        while pos + 8 <= end:
            fourcc, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
            if fourcc == b"LIST":
                stack.append((pos + 12 + size - 4 + (size % 2), end))
                pos, end = pos + 12, pos + 8 + size
                continue
            if fourcc[2:] == b"dc":
                frames.append(np.asarray(Image.open(io.BytesIO(data[pos + 8 : pos + 8 + size])).convert("RGB")))
            pos += 8 + size + (size % 2)
    return frames
