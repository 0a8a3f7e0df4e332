"""Image files of a run: ``<run>/media/<sha256[:2]>/<sha256>.<png|jpg>``, content-addressed.

What this module promises:

* A file's name is the SHA-256 of its bytes, so the same bytes logged twice (by any writer of
  the run, at any step) are one file, and a reader (the dashboard, a bundle import, sync) can
  check a file against its name. :func:`media_path` derives every name; :func:`parse_media_path`
  is the one check that a path read from a row or a bundle is such a name (no other path is
  ever opened), so a row can never point outside its run folder.
* A file is written with the store's visibility rule (temp file, fsync, rename, fsync the
  folder: :mod:`trackstore.store.atomic`) before the row naming it is buffered: a row that a
  reader sees names a complete file (a crash between the two leaves a file no row names,
  which costs disk, not correctness).
* :func:`sniff` reads a PNG or JPEG's format, width and height from its bytes without decoding
  the pixels, and refuses what is not a whole PNG or JPEG (another format, a truncated file, a
  PNG chunk whose CRC does not match) with a :class:`ValueError` saying why.

It imports nothing above :mod:`trackstore.store`.
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib
from pathlib import Path

from .atomic import write_bytes_atomic
from .layout import MEDIA_DIR

#: stored formats -> file extension
EXTENSIONS = {"png": "png", "jpeg": "jpg"}
#: stored formats -> HTTP content type
CONTENT_TYPES = {"png": "image/png", "jpeg": "image/jpeg"}
_EXT_FORMAT = {v: k for k, v in EXTENSIONS.items()}
_PATH = re.compile(rf"^{MEDIA_DIR}/([0-9a-f]{{2}})/([0-9a-f]{{64}})\.(png|jpg)$")
_SHA = re.compile(r"^[0-9a-f]{64}$")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8"
_MAX_SIDE = 1 << 20  # a width or height beyond this is not an image we keep


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_sha256(text: object) -> bool:
    """True for 64 lower-case hex digits (what every media file name is built from)."""
    return isinstance(text, str) and bool(_SHA.match(text))


def media_path(sha256: str, fmt: str) -> str:
    """The path of an image file relative to its run folder: ``media/ab/ab12....png``."""
    if not is_sha256(sha256) or fmt not in EXTENSIONS:
        raise ValueError(f"not a media file identity: {sha256!r} {fmt!r}")
    return f"{MEDIA_DIR}/{sha256[:2]}/{sha256}.{EXTENSIONS[fmt]}"


def parse_media_path(path: object) -> tuple[str, str] | None:
    """``(sha256, format)`` of a path :func:`media_path` makes, else None (nothing else is a
    media file: no ``..``, no absolute path, no other folder)."""
    if not isinstance(path, str):
        return None
    m = _PATH.match(path)
    if m is None or m.group(1) != m.group(2)[:2]:
        return None
    return m.group(2), _EXT_FORMAT[m.group(3)]


def store_media(run_dir: Path, data: bytes, sha256: str, fmt: str) -> str:
    """Make ``data`` (whose SHA-256 is ``sha256``) a file of the run and return its relative path.

    A file already there with the right size is kept (same name, same bytes: deduplicated).
    Raises ``OSError`` for disk trouble; the caller decides whether that may reach the user.
    """
    rel = media_path(sha256, fmt)
    path = Path(run_dir) / rel
    try:
        if path.stat().st_size == len(data):
            return rel
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data)
    return rel


def check_media_file(path: Path, rel: str) -> str | None:
    """Why the file at ``path``, stored as ``rel``, is not what its name says (None when it is)."""
    ident = parse_media_path(rel)
    if ident is None:
        return f"{rel!r} is not a media file name (media/<sha256[:2]>/<sha256>.png|jpg)"
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        return f"cannot read {rel}: {exc.strerror or exc}"
    if h.hexdigest() != ident[0]:
        return f"{rel}: its content's sha256 is {h.hexdigest()}, not the one its name says"
    return None


# ---------------------------------------------------------------------- reading headers
def sniff(data: bytes) -> tuple[str, int, int]:
    """``(format, width, height)`` of a whole PNG or JPEG file's bytes; :class:`ValueError` otherwise."""
    if data.startswith(PNG_SIGNATURE):
        return ("png", *_png_size(data))
    if data.startswith(JPEG_SOI):
        return ("jpeg", *_jpeg_size(data))
    what = "an empty file" if not data else "neither a PNG nor a JPEG file"
    raise ValueError(f"{what} (the first bytes are {data[:8]!r})")


def _png_size(data: bytes) -> tuple[int, int]:
    pos, n, size = len(PNG_SIGNATURE), len(data), None
    while pos + 12 <= n:
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 12 + length
        if end > n:
            break
        body = data[pos + 4:pos + 8 + length]
        if zlib.crc32(body) != struct.unpack(">I", data[end - 4:end])[0]:
            raise ValueError(f"a damaged PNG file (the CRC of its {ctype.decode('latin-1')!r} chunk does not match)")
        if size is None:
            if ctype != b"IHDR" or length < 8:
                raise ValueError("a damaged PNG file (it does not start with an IHDR chunk)")
            size = struct.unpack(">II", data[pos + 8:pos + 16])
        if ctype == b"IEND":
            return _checked(size)
        pos = end
    raise ValueError(f"a truncated PNG file ({n} bytes, no IEND chunk)")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    pos, n, size = 2, len(data), None
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            raise ValueError(f"a damaged JPEG file (no marker at byte {pos})")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2:pos + 4])
        if length < 2 or pos + 2 + length > n:
            break
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF) and length >= 7:
            height, width = struct.unpack(">HH", data[pos + 5:pos + 9])
            size = (width, height)
        if marker == 0xDA:  # start of scan: entropy-coded data up to the end-of-image marker
            if size is None:
                raise ValueError("a damaged JPEG file (no frame header before its image data)")
            if data.rfind(b"\xff\xd9") < pos + 2 + length:
                break
            return _checked(size)
        pos += 2 + length
    raise ValueError(f"a truncated JPEG file ({n} bytes, it ends before its end-of-image marker)")


def _checked(size: tuple[int, int] | None) -> tuple[int, int]:
    if size is None or not (0 < size[0] <= _MAX_SIDE and 0 < size[1] <= _MAX_SIDE):
        raise ValueError(f"an image of impossible size {size}")
    return int(size[0]), int(size[1])


def encode_png(raw: bytes, width: int, height: int, channels: int) -> bytes:
    """A PNG of 8-bit pixels given row by row (``channels`` 1 grey, 2 grey+alpha, 3 RGB, 4
    RGBA), always the same bytes for the same pixels (zlib level 6, filter 0): what
    content-addressing needs, whatever library versions are installed."""
    color = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    stride = width * channels
    if len(raw) != stride * height:
        raise ValueError(f"{len(raw)} bytes are not {height} rows of {width}x{channels} pixels")
    rows = b"".join(b"\x00" + raw[i:i + stride] for i in range(0, len(raw), stride))

    def chunk(ctype: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", zlib.crc32(ctype + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)
    return PNG_SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b"")
