"""``trackstore.Image``: an image logged as a value in ``run.log`` or in a sample row.

The promise: the bytes a reader gets back are the bytes that were logged.

* ``Image(path)`` of a PNG or JPEG file keeps the file's exact bytes (width and height are read
  from its header; nothing is decoded or re-encoded). ``Image(array)`` (numpy, or a tensor:
  ``detach().cpu().numpy()``) and ``Image(pil_image)`` are encoded as PNG by
  :func:`trackstore.store.media.encode_png` (zlib, no Pillow needed for arrays), always to the
  same bytes for the same pixels, so logging the same picture twice stores one file.
* Everything is checked when the ``Image`` is made, on the caller's thread: a missing or
  unreadable path, a file that is not a whole PNG or JPEG (truncated, another format), an array
  of another shape than ``HxW``, ``HxWx{1,2,3,4}`` or ``{1,3,4}xHxW``, floats outside [0, 1],
  integers outside [0, 255], NaN, a caption that is not text, all raise
  :class:`~trackstore.errors.InvalidValueError` naming the problem, before anything of the
  ``log`` call is recorded.
* Logging writes the file (``<run>/media/<sha256[:2]>/<sha256>.<ext>``, atomically, before the
  row naming it is buffered: :mod:`trackstore.store.media`) and one ``images`` row. Disk trouble
  never raises into the training loop: the image is left out with a warning on stderr.

In a sample row (``run.log_samples``), an ``Image`` anywhere in a field (``input``, ``output``
or any other, inside lists and dicts too: a VLM chat message) is stored the same way and the
row holds a reference in its place: ``{"_type": "image", "path", "sha256", "format", "width",
"height", "caption"}`` (:func:`swap_images`), which SQL and the dashboard find by ``_type``.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from ..errors import InvalidValueError
from ..store.media import encode_png, media_path, sha256_hex, sniff, store_media
from ..store.notices import warn
from ..store.text import escape_surrogates
from ..store.vocab import Kind
from .sink import RecordSink

REF_TYPE = "image"  # the "_type" of a reference in a sample row
MAX_IMAGE_BYTES = 256 << 20  # a file logged as an image is read whole, on the training thread
_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


class Image:
    """An image to log: ``trackstore.Image(path | numpy array | PIL image, caption=None)``."""

    __slots__ = ("data", "format", "width", "height", "sha256", "caption")

    def __init__(self, data_or_path: Any, caption: str | None = None):
        if caption is not None and not isinstance(caption, str):
            raise InvalidValueError(f"Image caption must be text or None, got {type(caption).__name__}")
        self.caption = escape_surrogates(caption) if caption is not None else None
        src = data_or_path
        if isinstance(src, Image):
            data, fmt, w, h = src.data, src.format, src.width, src.height
            if caption is None:
                self.caption = src.caption
        elif isinstance(src, (str, os.PathLike)):
            data, fmt, w, h = _from_file(src)
        elif isinstance(src, (bytes, bytearray, memoryview)):
            data = bytes(src)
            fmt, w, h = _sniffed(data, "image bytes")
        elif _is_pil(src):
            data, fmt, w, h = _from_pil(src)
        else:
            data, fmt, w, h = _from_array(src)
        self.data: bytes = data
        self.format: str = fmt
        self.width: int = w
        self.height: int = h
        self.sha256: str = sha256_hex(data)

    @property
    def size(self) -> int:
        """Bytes of the stored file."""
        return len(self.data)

    @property
    def path(self) -> str:
        """Where the file is stored, relative to the run folder."""
        return media_path(self.sha256, self.format)

    def __repr__(self) -> str:
        cap = f" caption={self.caption!r:.40}" if self.caption else ""
        return f"<trackstore.Image {self.format} {self.width}x{self.height} {self.sha256[:12]}{cap}>"

    def ref(self) -> dict:
        """The reference a sample row holds in the image's place."""
        return {"_type": REF_TYPE, "path": self.path, "sha256": self.sha256, "format": self.format,
                "width": self.width, "height": self.height, "caption": self.caption}


# ---------------------------------------------------------------------- sources
def _sniffed(data: bytes, what: str) -> tuple[str, int, int]:
    try:
        return sniff(data)
    except ValueError as exc:
        raise InvalidValueError(f"{what} is not an image trackstore can store: {exc}; PNG and JPEG files are "
                                "kept as they are, pass other formats as a PIL image or an array") from None


def _from_file(path: str | os.PathLike) -> tuple[bytes, str, int, int]:
    shown = os.fspath(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_IMAGE_BYTES:
                raise InvalidValueError(f"image file {shown!r} is {size} bytes; images over {MAX_IMAGE_BYTES >> 20} MiB "
                                        "are not stored (log it as an artifact)")
            data = f.read()
    except FileNotFoundError:
        raise InvalidValueError(f"image file {shown!r} does not exist") from None
    except IsADirectoryError:
        raise InvalidValueError(f"image path {shown!r} is a folder, not a file") from None
    except OSError as exc:
        raise InvalidValueError(f"image file {shown!r} cannot be read: {exc.strerror or exc}") from None
    return (data, *_sniffed(data, f"image file {shown!r}"))


def _is_pil(obj: Any) -> bool:
    return type(obj).__module__.startswith("PIL.") and hasattr(obj, "tobytes") and hasattr(obj, "mode")


def _from_pil(img: Any) -> tuple[bytes, str, int, int]:
    mode = img.mode
    if mode not in _MODES:
        alpha = "A" in mode or "transparency" in getattr(img, "info", {})
        img = img.convert("RGBA" if alpha else "RGB")
        mode = img.mode
    w, h = img.size
    if not (w and h):
        raise InvalidValueError(f"Image of a PIL image of size {w}x{h}: an image needs pixels")
    return encode_png(img.tobytes(), w, h, _MODES[mode]), "png", w, h


def _untensor(value: Any) -> Any:
    detach = getattr(value, "detach", None)
    if callable(detach):
        value = detach()
        cpu = getattr(value, "cpu", None)
        if callable(cpu):
            value = cpu()
        numpy = getattr(value, "numpy", None)
        if callable(numpy):
            try:
                return numpy()
            except (TypeError, RuntimeError):  # bfloat16 and friends
                return value.float().numpy()
    return value


def _from_array(value: Any) -> tuple[bytes, str, int, int]:
    value = _untensor(value)
    if not hasattr(value, "__array_interface__") and not hasattr(value, "__array__"):
        raise InvalidValueError(f"Image takes a file path, a numpy array or a PIL image, got {type(value).__name__}")
    import numpy as np

    a = np.asarray(value)
    if a.ndim == 3 and a.shape[2] not in (1, 2, 3, 4) and a.shape[0] in (1, 3, 4):
        a = np.moveaxis(a, 0, -1)  # channels first (CxHxW), as tensors are
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in (1, 2, 3, 4) or not a.shape[0] or not a.shape[1]:
        raise InvalidValueError(f"Image array must be HxW, HxWxC or CxHxW with C in 1, 3, 4 (and pixels), "
                                f"got shape {tuple(int(n) for n in np.shape(value))}")
    a = _as_uint8(a, np)
    h, w, c = (int(n) for n in a.shape)
    return encode_png(np.ascontiguousarray(a).tobytes(), w, h, c), "png", w, h


def _as_uint8(a: Any, np: Any) -> Any:
    kind = a.dtype.kind
    if kind == "b":
        return a.astype(np.uint8) * 255
    if a.dtype == np.uint8:
        return a
    if kind == "f":
        if not np.isfinite(a).all():
            raise InvalidValueError("Image array holds NaN or infinite values")
        lo, hi = float(a.min()), float(a.max())
        if lo < 0.0 or hi > 1.0:
            raise InvalidValueError(f"Image float array must hold values in [0, 1], got [{lo:g}, {hi:g}]; "
                                    "scale it, or pass uint8")
        return np.rint(a.astype(np.float64) * 255.0).astype(np.uint8)
    if kind in "iu":
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi > 255:
            raise InvalidValueError(f"Image integer array must hold values in [0, 255], got [{lo}, {hi}]")
        return a.astype(np.uint8)
    raise InvalidValueError(f"Image array has dtype {a.dtype}; use uint8, a float in [0, 1] or bool")


# ---------------------------------------------------------------------- logging
def as_image_list(key: str, value: Any) -> list[Image]:
    """A ``log`` value that holds images as a list of them; InvalidValueError for a list that mixes."""
    if isinstance(value, Image):
        return [value]
    items = list(value)
    if not items or not all(isinstance(v, Image) for v in items):
        raise InvalidValueError(f"metric {key!r}: a list logged as a value must hold trackstore.Image objects only")
    return items


def store_files(run: RecordSink, images: Iterable[Image], what: str) -> set[str]:
    """Write each image's file into the run; returns the sha256 of those that could not be
    written (warned about, never raised: logging never stops training)."""
    failed: set[str] = set()
    for img in images:
        if img.sha256 in failed:
            continue
        try:
            store_media(run.paths.dir, img.data, img.sha256, img.format)
        except OSError as exc:
            failed.add(img.sha256)
            warn(f"{what}: could not write image file {img.path} in {run.paths.dir}: {exc}; the image is left out")
    return failed


def log_images(run: RecordSink, items: Mapping[str, list[Image]], step: int, ts: Any) -> int:
    """Store ``items`` (key -> images, already checked) as ``images`` rows of ``run`` at ``step``.
    Returns the rows buffered."""
    n = 0
    for key, images in items.items():
        failed = store_files(run, images, f"image {key!r} at step {step}")
        for index, img in enumerate(images):
            if img.sha256 in failed:
                continue
            run.append(Kind.IMAGES, {"step": step, "key": key, "index": index, "path": img.path, "sha256": img.sha256,
                                     "size": img.size, "width": img.width, "height": img.height,
                                     "format": img.format, "caption": img.caption, "ts": ts})
            n += 1
    return n


def swap_images(value: Any, found: list[Image]) -> Any:
    """``value`` with every :class:`Image` in it (in lists, tuples and dicts) replaced by its
    reference (:meth:`Image.ref`), each appended to ``found``; the same object when it holds none."""
    if isinstance(value, Image):
        found.append(value)
        return value.ref()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        n = len(found)
        out = {k: swap_images(v, found) for k, v in value.items()}
        return out if len(found) > n else value
    if isinstance(value, (list, tuple)):
        n = len(found)
        items = [swap_images(v, found) for v in value]
        return items if len(found) > n else value
    return value
