"""TensorBoard logdirs as trackstore runs (``trackstore ingest --from tensorboard``).

What it reads, with TensorBoard's own readers (tensorboard 2.21, tensorboard-data-server 0.7.2):

* **Runs.** Every folder holding event files (a name containing ``tfevents``, TensorBoard's own
  glob) is one run, as TensorBoard shows it: a logdir with ``train/`` and ``eval/`` is two runs.
  Its name is its path relative to the location given (the folder's own name for event files
  directly in it); its source id is the folder's absolute path; its run id is
  ``tb-<folder name>-<8 hex digits of the source id's SHA-256>`` (the same however the folder is
  reached); its project is ``tensorboard``. A run's files are read in name order, as
  TensorBoard reads them.
* **The reader** is TensorBoard's Rust data server (``tensorboard-data-server``, the reader
  ``tensorboard`` starts through ``SubprocessServerDataIngester``), asked through its gRPC data
  provider API (``TensorBoardDataProviderStub``: ``ListRuns``, ``ListPlugins``, ``ReadScalars``,
  ``ListTensors``/``ReadTensors``, ``ListBlobSequences``/``ReadBlobSequences``). It is started on
  a private folder of links to the run's own files (``--reload=once``, ``--checksum``) and read
  once its load cycle has finished. **Every point is kept**: the server samples each series at
  load time (1000 scalars, 100 tensors, 10 blobs) unless told ``--samples-per-plugin
  <plugin>=all``, which it is for every plugin TensorBoard knows (a run holding another plugin's
  series is loaded again with that plugin's hint too), and each read asks for a downsample larger
  than any series (``ReadScalars`` samples to ``num_points`` otherwise). The server holds the
  run's data in memory while it is read, images and audio included. When the server binary is
  missing (``TENSORBOARD_DATA_SERVER_BINARY`` naming no file, a platform without it) or fails,
  TensorBoard's pure-Python ``EventAccumulator``
  (``tensorboard.backend.event_processing.plugin_event_accumulator``, every tensor kept) reads the
  run instead, about 6x slower (1M scalars: 10 s against 1.7 s); ``run.json``
  ``ingested.meta.reader`` says which one read it. Both read TF1 ``simple_value`` scalars and TF2
  scalar tensors.
* **TensorBoard's view, not the raw log.** A series keeps strictly increasing steps: a point
  logged at a step not above an earlier one replaces the earlier points from that step on
  (TensorBoard's rule for a job restarted from a checkpoint; the data server applies it, and the
  same rule is applied to what ``EventAccumulator`` reads). The data server keeps scalars as
  float32 (``simple_value`` is a float32 field) and reads only float32 scalar tensors: a
  float64 scalar tensor, or a summary without a data class of a plugin it does not know, is not
  in its view (nor in TensorBoard's dashboard, which it serves), and cannot be counted either;
  ``EventAccumulator`` keeps numeric scalar tensors of any type.

How it maps (the table for docs/ingest.md is in the helper's report):

* scalars -> metrics (the tag is the key), with the step and the event's ``wall_time``.
  TensorBoard stores ``wall_time`` as float64 Unix seconds (about 0.24 microseconds apart at
  today's dates): kept to the microsecond, ``round(wall_time * 1e6)``.
* histograms (the histograms plugin: a ``[k, 3]`` tensor of ``left, right, count`` per bucket;
  TF1 ``HistogramProto``, converted by TensorBoard to that form) -> histograms: edges the first
  left edge and every right edge, counts the third column. A histogram without buckets, or
  whose buckets leave gaps, is counted as not mapped.
* text (the text plugin: a string tensor) -> samples: ``split`` the tag, ``input`` empty,
  ``output`` the text (UTF-8); a vector of strings is one sample per string, a table one sample
  per row (the row's cells as a JSON list).
* hparams (the hparams plugin): the session start info's hyperparameters -> config (numbers as
  TensorBoard keeps them, float64); the metrics an hparams experiment summary in the run names
  -> summary, each the last value of that scalar tag in the run (what the HParams dashboard
  shows); the session end info's status, when written, -> status (success -> finished, failure
  -> failed). The session's group name, model URI and start time are kept in ``ingested.meta``.
* images, audio, graphs, run metadata, PR curves, meshes, custom scalar layouts and any other
  plugin -> counted per kind as not mapped (``image``, ``audio``, ``graph``...), one per point
  TensorBoard keeps.
* times: created = the run's first event's wall time, ended = its newest event's. TensorBoard
  has no run status: a run with an event written in the last 120 seconds is ``running`` (with
  that event's time as heartbeat; readers call it crashed once that is stale), else ``finished``.
  The host is taken from the first event file's name (``events.out.tfevents.<time>.<host>...``).

A damaged file gives its readable part and a problem naming the file: a record cut off at the
end (a killed writer, a copy stopped half-way: found by walking the records' length headers
against the file's size, which neither reader reports), or a record that fails its checksum
(reported by the reader, which stops reading that file there). A cut-off tail of a running run's
file written in the last 120 seconds is a record still being written, not damage: it is noted
in ``ingested.meta`` and the next ingest reads it.

Speed: the run's points come from the server as columns (numpy from the response's repeated
fields, one ``add_points`` call); the length walk and the imports the mapping needs run while the
server loads. 1M scalars (100 tags x 10,000 steps): ``read`` 1.16x the data server alone
(benchmarks/ingest.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from trackstore.errors import TrackstoreError, UsageError
from trackstore.store.names import MAX_RUN_ID_CHARS
from trackstore.store.vocab import RunStatus
from trackstore.upkeep.ingest import ExternalRun

from . import Found

__all__ = ["discover", "read", "read_all_scalars", "run_id_for", "TensorboardReadError", "DEFAULT_PROJECT",
           "RUNNING_WINDOW_S"]

DEFAULT_PROJECT = "tensorboard"
EVENT_INFIX = "tfevents"  # TensorBoard's glob for event files: `*tfevents*`
RUNNING_WINDOW_S = 120.0  # a run with an event newer than this is `running`
ALL_POINTS = 2**62  # a downsample no series reaches: the data server returns every point
MAX_MESSAGE_BYTES = 1 << 30  # a larger read is split by tags (a protobuf message must stay < 2 GiB)
# plugins whose points the data server must keep all of (it samples every series otherwise)
_MAPPED = ("scalars", "histograms", "text", "hparams")
_NOT_MAPPED = {"images": "image", "audio": "audio", "graphs": "graph", "graph_run_metadata": "run metadata",
               "graph_run_metadata_graph": "run metadata", "graph_tagged_run_metadata": "run metadata",
               "graph_keras_model": "keras model", "pr_curves": "pr curve", "mesh": "mesh",
               "custom_scalars": "custom scalars layout"}
_HPARAMS_START = "_hparams_/session_start_info"
_HPARAMS_END = "_hparams_/session_end_info"
_HPARAMS_EXPERIMENT = "_hparams_/experiment"
_HOST = re.compile(r"tfevents\.\d+\.(.+)\.\d+\.\d+(?:\..*)?$")
_SERVER_LOG = re.compile(r"^\[\S+\s+(WARN|ERROR)\s+\S+\]\s*(.*)$")
# the data server's read errors (its ReadEventError variants, as its log names them), in words
_READ_ERRORS = (("InvalidRecord", "a record fails its checksum"),
                ("InvalidProto", "a record is not a readable Event"),
                ("NanWallTime", "an event has no valid wall time (NaN)"),
                ("ReadRecordError(BadLengthCrc", "a record's length fails its checksum"),
                ("ReadRecordError(TooLarge", "a record is too large to read"),
                ("ReadRecordError(Io", "the file could not be read"))
_LOADER_DATA_LOSS = re.compile(r"^Truncated record in (.+?) \((.*)\)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_LENGTH = struct.Struct("<Q")


class TensorboardReadError(TrackstoreError):
    """A run of which nothing could be read (its event files are gone or unreadable)."""


class _ServerUnavailable(Exception):
    """The data server cannot be used for this run (missing, failed to start, died): read with
    EventAccumulator instead."""


@dataclass(frozen=True)
class RunFolder:
    """What :func:`discover` found: a folder of event files, and the run's name."""

    folder: Path
    name: str


# ---------------------------------------------------------------------------- discover
def discover(location: str) -> list[Found]:
    """The TensorBoard runs at ``location``: every folder at or under it holding event files
    (symbolic links followed, as TensorBoard does), or the folder of one event file."""
    path = Path(location).expanduser()
    if not path.exists():
        raise UsageError(f"{location}: no such file or folder")
    if path.is_file():
        if EVENT_INFIX not in path.name:
            return []
        base = path.parent.resolve()
        folders = [(base, base.name or str(base))]
    else:
        base = path.resolve()
        folders = [(folder, _run_name(base, folder)) for folder in _run_folders(base)]
    out = []
    for folder, name in folders:
        files = event_files(folder)
        if not files:
            continue
        out.append(Found(source="tensorboard", source_id=str(folder), location=str(folder), label=name,
                         size=sum(_size(f) for f in files), handle=RunFolder(folder, name)))
    return sorted(out, key=lambda f: (f.label, f.source_id))


def _run_name(base: Path, folder: Path) -> str:
    rel = folder.relative_to(base).as_posix()
    return base.name or str(base) if rel == "." else rel


def _run_folders(base: Path) -> list[Path]:
    """Folders at or under ``base`` holding an event file, each once (link cycles cut)."""
    seen: set[tuple[int, int]] = set()
    found = []
    for here, dirs, files in os.walk(base, followlinks=True):
        try:
            st = os.stat(here)
        except OSError:
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs.sort()
        if any(EVENT_INFIX in name for name in files):
            found.append(Path(here))
    return found


def event_files(folder: Path) -> list[Path]:
    """The event files of a run folder, in TensorBoard's reading order (by name)."""
    try:
        names = sorted(p for p in folder.iterdir() if EVENT_INFIX in p.name and p.is_file())
    except OSError:
        return []
    return names


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def run_id_for(source_id: str) -> str:
    """``tb-<folder>-<hash8>``: the run folder's own name made path-safe (its end kept when too
    long) and 8 hex digits of the source id's SHA-256. A function of the source id alone, so the
    run keeps its id however the folder is reached (``logs/`` or ``logs/exp1``), and two folders
    of one name never meet in one run id."""
    digest = hashlib.sha256(source_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    room = MAX_RUN_ID_CHARS - len("tb-") - len(digest) - 1
    folder = source_id.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    safe = _UNSAFE.sub("_", folder)[-room:].strip("._-") or "run"
    return f"tb-{safe}-{digest}"


# ---------------------------------------------------------------------------- read
@dataclass
class _Loaded:
    """One run as a TensorBoard reader gave it, before mapping."""

    reader: str
    start_time: float | None = None
    # tag -> (steps int64, wall times float64, values float64)
    scalars: dict[str, tuple[Any, Any, Any]] = field(default_factory=dict)
    # plugin -> tag -> [(step, wall time, ndarray)]
    tensors: dict[str, dict[str, list[tuple[int, float, Any]]]] = field(default_factory=dict)
    hparams: dict[str, bytes] = field(default_factory=dict)  # hparams tag -> its plugin content
    unmapped: Counter = field(default_factory=Counter)
    first_wall: float | None = None  # of the points read
    last_wall: float | None = None
    problems: list[str] = field(default_factory=list)

    def saw(self, wall: float | None) -> None:
        if wall is None or not wall > 0:
            return
        wall = float(wall)
        if self.last_wall is None or wall > self.last_wall:
            self.last_wall = wall
        if self.first_wall is None or wall < self.first_wall:
            self.first_wall = wall


def read(found: Found, *, progress: Callable[[int], None] | None = None) -> ExternalRun:
    """The whole run ``found`` names (module docstring); raises only when no event file of it
    can be read."""
    handle: RunFolder = found.handle if isinstance(found.handle, RunFolder) else RunFolder(
        Path(found.location), found.label)
    try:
        import tensorboard  # noqa: F401
    except ImportError as exc:
        raise TensorboardReadError(f"reading {handle.folder} needs TensorBoard's own readers: pip install "
                                   f"tensorboard ({exc})") from exc
    files = event_files(handle.folder)
    if not files:
        raise TensorboardReadError(f"{handle.folder}: no TensorBoard event files (*{EVENT_INFIX}*) to read")
    framing = _Framing(files)
    try:
        loaded = _read_with_server(handle.folder, files, framing)
    except _ServerUnavailable as exc:
        loaded = _read_with_accumulator(handle.folder, files, framing)
        loaded.reader += f" (the data server could not be used: {exc})"
    if progress is not None:
        progress(sum(_size(f) for f in files))
    out = ExternalRun(source="tensorboard", source_id=found.source_id, location=str(handle.folder),
                      project=DEFAULT_PROJECT, name=handle.name, run_id=run_id_for(found.source_id))
    _map(loaded, out)
    damaged, writing = framing.problems(live=out.status == RunStatus.RUNNING)
    out.problems.extend(damaged)
    out.problems.extend(loaded.problems)
    out.source_meta.update(reader=loaded.reader, files=[f.name for f in files])
    if writing:
        out.source_meta["record being written"] = writing
    m = _HOST.search(files[0].name)
    if m:
        out.host = m.group(1)
    return out


def _map(loaded: _Loaded, out: ExternalRun) -> None:
    """``loaded`` in the store's terms (module docstring, "How it maps")."""
    import numpy as np

    series = [(tag, s) for tag, s in loaded.scalars.items() if len(s[0])]
    if series:  # one column each, the key repeated per point
        tags = np.empty(len(series), dtype=object)
        tags[:] = [tag for tag, _ in series]
        keys = np.repeat(tags, [len(s[0]) for _, s in series])
        steps, walls, values = (np.concatenate([s[i] for _, s in series]) for i in range(3))
        out.add_points(steps, keys, values, _ts_us(walls))
        loaded.saw(float(walls.max()))
    for tag, points in loaded.tensors.get("histograms", {}).items():
        for step, wall, arr in points:
            loaded.saw(wall)
            _add_histogram(out, tag, step, wall, arr)
    for tag, points in loaded.tensors.get("text", {}).items():
        for step, wall, arr in points:
            loaded.saw(wall)
            _add_text(out, tag, step, wall, arr)
    ended = _map_hparams(loaded, out)
    for kind, n in loaded.unmapped.items():
        out.skip(kind, n)
    if loaded.last_wall is None:  # no point at all: the run's only time is its start
        loaded.saw(loaded.start_time)
    out.created_at = min((t for t in (loaded.start_time, loaded.first_wall) if t is not None), default=None)
    out.ended_at = loaded.last_wall
    if ended is not None:  # an hparams session end said how the run ended
        out.status = ended
    else:
        recent = loaded.last_wall is not None and time.time() - loaded.last_wall < RUNNING_WINDOW_S
        out.status = RunStatus.RUNNING if recent else RunStatus.FINISHED
    if out.status == RunStatus.RUNNING:
        out.heartbeat_at = loaded.last_wall
        out.ended_at = None
    # to the microsecond as the rows' times are (run.json's times round the float on their own)
    out.created_at, out.ended_at, out.heartbeat_at = (None if t is None else _one_ts(t) / 1e6
                                                      for t in (out.created_at, out.ended_at, out.heartbeat_at))


def _ts_us(walls):
    import numpy as np

    return np.rint(np.asarray(walls, dtype=np.float64) * 1e6).astype(np.int64)


def _one_ts(wall: float) -> int:
    return int(round(wall * 1e6))


def _add_histogram(out: ExternalRun, tag: str, step: int, wall: float, arr) -> None:
    import numpy as np

    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 3 or arr.shape[0] == 0:
        out.skip("histogram without buckets" if arr.size == 0 else "histogram of another shape")
        return
    left, right, counts = arr[:, 0], arr[:, 1], arr[:, 2]
    if not np.array_equal(left[1:], right[:-1]):
        out.skip("histogram with gaps between buckets")
        return
    edges = np.concatenate([left[:1], right])
    out.add_histogram(step, tag, counts=counts.tolist(), edges=edges.tolist(), ts_us=_one_ts(wall))


def _text(cell: Any) -> str:
    return cell.decode("utf-8", "surrogateescape") if isinstance(cell, bytes) else str(cell)


def _add_text(out: ExternalRun, tag: str, step: int, wall: float, arr) -> None:
    import numpy as np

    arr = np.asarray(arr, dtype=object)
    ts = _one_ts(wall)
    if arr.ndim == 0:
        out.add_sample(step, None, _text(arr.item()), split=tag, ts_us=ts)
        return
    for i, row in enumerate(arr):
        output = _text(row) if np.ndim(row) == 0 else [_text(c) for c in np.asarray(row, dtype=object).ravel()]
        out.add_sample(step, None, output, split=tag, sample_index=i, ts_us=ts)


def _map_hparams(loaded: _Loaded, out: ExternalRun) -> str | None:
    """Config, hparams metrics and meta from the hparams plugin's summaries; the status an
    hparams session end gives (None: none, or one that says neither success nor failure)."""
    if not loaded.hparams:
        return None
    from google.protobuf import json_format
    from tensorboard.plugins.hparams import api_pb2, metadata

    meta: dict[str, Any] = {}
    status = None

    def parsed(key: str, parse: Callable[[bytes], Any], what: str) -> Any:
        """The hparams summary ``key`` parsed, or None (absent; unreadable: a problem named)."""
        content = loaded.hparams.get(key)
        if content is None:
            return None
        try:
            return parse(content)
        except Exception as exc:  # noqa: BLE001 - TensorBoard raises HParamsError or a protobuf DecodeError
            out.problems.append(f"hparams {what} of run {out.name!r} unreadable: {exc}")
            return None

    start = parsed(_HPARAMS_START, metadata.parse_session_start_info_plugin_data, "session start info")
    if start is not None:
        out.config.update({k: json_format.MessageToDict(v) for k, v in start.hparams.items()})
        meta.update({k: getattr(start, k) for k in ("group_name", "model_uri", "monitor_url", "start_time_secs")
                     if getattr(start, k)})
    end = parsed(_HPARAMS_END, metadata.parse_session_end_info_plugin_data, "session end info")
    if end is not None:
        meta["session_status"] = api_pb2.Status.Name(end.status)
        if end.status == api_pb2.STATUS_SUCCESS:
            status = RunStatus.FINISHED
        elif end.status == api_pb2.STATUS_FAILURE:
            status = RunStatus.FAILED
    experiment = parsed(_HPARAMS_EXPERIMENT, metadata.parse_experiment_plugin_data, "experiment")
    if experiment is not None:
        names = [m.name.tag for m in experiment.metric_infos if m.name.group in ("", ".")]
        meta["metrics"] = [m.name.tag if m.name.group in ("", ".") else f"{m.name.group}/{m.name.tag}"
                           for m in experiment.metric_infos]
        for tag in names:
            series = loaded.scalars.get(tag)
            if series is not None and len(series[2]):
                out.summary[tag] = float(series[2][-1])
    if meta:
        out.source_meta["hparams"] = meta
    return status


# ---------------------------------------------------------------------------- damage
class _Framing:
    """Walks each file's record frames (8-byte length, 4-byte length checksum, data, 4-byte data
    checksum) by their lengths alone, to find a record cut off at the end of the file, which
    both TensorBoard readers take for one still being written and skip without a word."""

    def __init__(self, files: list[Path]):
        self._files = files
        self._state: dict[Path, tuple[int, int, str | None]] = {}  # file -> (good end, size seen, problem)

    def walk(self) -> None:
        for f in self._files:
            self._walk(f, 0)

    def _walk(self, path: Path, pos: int) -> None:
        import mmap

        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                at = pos
                if size - pos >= 12:
                    with mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as data:
                        unpack = _LENGTH.unpack_from
                        while at + 12 <= size:
                            end = at + 12 + unpack(data, at)[0] + 4
                            if end > size:
                                break
                            at = end
        except (OSError, ValueError) as exc:
            self._state[path] = (pos, pos, f"{path}: could not be read: {exc}")
            return
        problem = None
        if at < size:
            problem = (f"{path}: the last {size - at} bytes (from byte {at} of {size}) are not a whole record "
                       f"(a record cut off, or a corrupt length); the records before them were read")
        self._state[path] = (at, size, problem)

    def problems(self, *, live: bool) -> tuple[list[str], list[str]]:
        """One problem per damaged file, after the reader is done (a file that grew meanwhile is
        walked on from its last whole record); and, for a ``live`` run, the files whose cut-off
        tail was written in the last :data:`RUNNING_WINDOW_S` seconds: a record being written,
        which the next ingest reads, not damage."""
        if not self._state:
            self.walk()
        problems, writing = [], []
        for f in self._files:
            good, seen, problem = self._state.get(f, (0, 0, None))
            if problem is not None and _size(f) != seen:
                self._walk(f, good)
                good, seen, problem = self._state[f]
            if problem is None:
                continue
            try:
                fresh = time.time() - f.stat().st_mtime < RUNNING_WINDOW_S
            except OSError:
                fresh = False
            if live and fresh:
                writing.append(f"{f.name}: {seen - good} bytes from byte {good}")
            else:
                problems.append(problem)
        return problems, writing


# ---------------------------------------------------------------------------- the data server
def _server_binary() -> str:
    from tensorboard.data import server_ingester

    try:
        return server_ingester.get_server_binary().path
    except server_ingester.NoDataServerError as exc:
        raise _ServerUnavailable(str(exc)) from exc


class _DataServer:
    """TensorBoard's data server on one logdir, loaded once with every point of ``plugins`` kept,
    as ``SubprocessServerDataIngester`` starts it (port file, ``--die-after-stdin``), plus: its log
    read to know when the load cycle finished and which files it could not read."""

    def __init__(self, binary: str, logdir: Path, plugins: Iterable[str], workdir: Path):
        self.warnings: list[str] = []
        self._done = threading.Event()
        self._finished = False
        self._port_file = workdir / "port"
        self._error_file = workdir / "startup_error"
        for f in (self._port_file, self._error_file):
            f.unlink(missing_ok=True)
        hints = ",".join(f"{p}=all" for p in sorted(plugins))
        args = [binary, f"--logdir={logdir}", "--reload=once", f"--samples-per-plugin={hints}", "--port=0",
                f"--port-file={self._port_file}", f"--error-file={self._error_file}", "--die-after-stdin",
                "--checksum"]
        # the server's log: its warnings (files it could not read) and "Finished load cycle"
        env = {**os.environ, "RUST_LOG": "warn,rustboard_core::cli=info"}
        self._channel = None
        self.stub = None
        try:
            self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, env=env)
        except OSError as exc:
            raise _ServerUnavailable(f"{binary} could not be started: {exc}") from exc
        self._log = threading.Thread(target=self._watch, name="tensorboard-data-server-log", daemon=True)
        self._log.start()

    def _watch(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if "Finished load cycle" in line:
                self._finished = True
                self._done.set()
                continue
            m = _SERVER_LOG.match(line)
            if m:
                self.warnings.append(m.group(2))
        self._done.set()

    def connect(self) -> None:
        """Wait for the load cycle to finish, then open the gRPC channel."""
        import grpc
        from tensorboard.data.proto import data_provider_pb2_grpc

        self._done.wait()
        if not self._finished:
            self._proc.wait()
            why = _read_text(self._error_file) or f"exited with status {self._proc.returncode}"
            raise _ServerUnavailable(f"the data server stopped before loading the run: {why.strip()}")
        port = int(_read_text(self._port_file) or "0")
        if not port:
            raise _ServerUnavailable("the data server wrote no port")
        self._channel = grpc.insecure_channel(f"localhost:{port}", options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.enable_http_proxy", 0)])
        self.stub = data_provider_pb2_grpc.TensorBoardDataProviderStub(self._channel)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()  # --die-after-stdin: the server exits
            except OSError:
                pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.join(timeout=10)
        if self._proc.stderr is not None:
            self._proc.stderr.close()


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


@contextmanager
def _server(logdir: Path, plugins: Iterable[str], workdir: Path) -> Iterator[_DataServer]:
    server = _DataServer(_server_binary(), logdir, plugins, workdir)
    try:
        server.connect()
        yield server
    finally:
        server.close()


def _link_view(view: Path, files: list[Path]) -> bool:
    """A folder of links to exactly the run's files: the server then loads this run alone, not
    the runs in its subfolders. False where links cannot be made."""
    try:
        view.mkdir()
        for f in files:
            (view / f.name).symlink_to(f.resolve())
    except OSError:
        return False
    return True


def _read_with_server(folder: Path, files: list[Path], framing: _Framing) -> _Loaded:
    import grpc

    work = Path(tempfile.mkdtemp(prefix="trackstore-tb-"))
    try:
        view = work / "run"
        logdir, run = (view, ".") if _link_view(view, files) else (folder, ".")
        plugins = set(_MAPPED) | set(_NOT_MAPPED)
        for attempt in range(2):
            server = _DataServer(_server_binary(), logdir, plugins, work)
            try:
                if attempt == 0:  # while the server loads, in a process of its own
                    framing.walk()
                    _prepare()
                server.connect()
                listed = _list_plugins(server)
                more = {p for p in listed if p not in plugins and "," not in p and "=" not in p}
                if more and attempt == 0:  # a plugin TensorBoard does not know: load again keeping all of it
                    plugins |= more
                    continue
                loaded = _Loaded(reader="tensorboard-data-server " + _server_version())
                _fill_from_server(server, run, listed, loaded)
                loaded.problems.extend(_server_problems(server.warnings, view, folder))
                return loaded
            except grpc.RpcError as exc:
                raise _ServerUnavailable(f"the data server failed: {exc.code()} {exc.details()}") from exc
            finally:
                server.close()
        raise AssertionError("unreachable")  # pragma: no cover - the second attempt returns
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _prepare() -> None:
    """Import what reading and mapping the points need (grpc's and TensorBoard's modules, numpy,
    pyarrow, and what pyarrow loads at its first numpy conversion, about 0.2 s) while the data
    server loads, rather than after."""
    import numpy as np
    import pyarrow as pa
    from tensorboard.data.proto import data_provider_pb2  # noqa: F401
    from tensorboard.util import tensor_util  # noqa: F401

    pa.array(np.zeros(0, np.int64), pa.int64())


def _server_version() -> str:
    try:
        import tensorboard_data_server

        return str(tensorboard_data_server.__version__)
    except (ImportError, AttributeError):
        return "(version unknown)"


def _server_problems(warnings: list[str], view: Path, folder: Path) -> list[str]:
    """The server's warnings as problems (each is about data it could not read: a file it could
    not open or stopped reading, an event it dropped), its view's paths named as the run's own."""
    out = []
    for w in warnings:
        text = w.replace(str(view), str(folder))
        m = re.match(r"^Read error in (.+?): (.*)$", text)
        if m is None:
            out.append(f"TensorBoard's data server: {text}")
            continue
        what = next((words for variant, words in _READ_ERRORS if m.group(2).startswith(variant)), m.group(2))
        out.append(f"{m.group(1)}: {what}; TensorBoard's data server read the records before it and stopped "
                   f"reading the file there")
    return out


def _list_plugins(server: _DataServer) -> list[str]:
    from tensorboard.data.proto import data_provider_pb2 as pb

    return [p.name for p in server.stub.ListPlugins(pb.ListPluginsRequest()).plugins]


def _request(cls, plugin: str, run: str, tags: list[str] | None = None, downsample: bool = True):
    req = cls()
    req.plugin_filter.plugin_name = plugin
    req.run_tag_filter.runs.names.append(run)
    if tags is not None:
        req.run_tag_filter.tags.names.extend(sorted(tags))
    if downsample:
        req.downsample.num_points = ALL_POINTS
    return req


def _read_split(call: Callable, list_call: Callable, make: Callable, run: str, tags: list[str] | None = None):
    """``call(make(tags))``'s tag entries for ``run``; a response too large for one message is
    read again in halves of its tags."""
    import grpc

    try:
        res = call(make(tags))
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise
        if tags is None:
            tags = [t.tag_name for r in list_call().runs if r.run_name == run for t in r.tags]
        if len(tags) < 2:
            raise
        half = len(tags) // 2
        return (_read_split(call, list_call, make, run, tags[:half])
                + _read_split(call, list_call, make, run, tags[half:]))
    return [t for r in res.runs if r.run_name == run for t in r.tags]


def _fill_from_server(server: _DataServer, run: str, plugins: list[str], loaded: _Loaded) -> None:
    import numpy as np
    from tensorboard.data.proto import data_provider_pb2 as pb
    from tensorboard.util import tensor_util

    stub = server.stub
    for r in stub.ListRuns(pb.ListRunsRequest()).runs:
        if r.name == run and r.start_time:
            loaded.start_time = r.start_time  # the earliest event's time, the file version record's included

    def scalars(plugin: str):
        return _read_split(stub.ReadScalars, lambda: stub.ListScalars(_request(pb.ListScalarsRequest, plugin, run,
                                                                               downsample=False)),
                           lambda tags: _request(pb.ReadScalarsRequest, plugin, run, tags), run)

    def tensors(plugin: str):
        return _read_split(stub.ReadTensors, lambda: stub.ListTensors(_request(pb.ListTensorsRequest, plugin, run,
                                                                               downsample=False)),
                           lambda tags: _request(pb.ReadTensorsRequest, plugin, run, tags), run)

    def blobs(plugin: str):
        return _read_split(stub.ReadBlobSequences,
                           lambda: stub.ListBlobSequences(_request(pb.ListBlobSequencesRequest, plugin, run,
                                                                   downsample=False)),
                           lambda tags: _request(pb.ReadBlobSequencesRequest, plugin, run, tags), run)

    for plugin in plugins:
        if plugin == "scalars":
            for entry in scalars(plugin):
                d = entry.data
                n = len(d.step)
                loaded.scalars[entry.tag_name] = (np.fromiter(d.step, np.int64, n),
                                                  np.fromiter(d.wall_time, np.float64, n),
                                                  np.fromiter(d.value, np.float64, n))
        elif plugin in ("histograms", "text"):
            series = loaded.tensors.setdefault(plugin, {})
            for entry in tensors(plugin):
                d = entry.data
                series[entry.tag_name] = [(int(s), float(w), tensor_util.make_ndarray(v))
                                          for s, w, v in zip(d.step, d.wall_time, d.value)]
        elif plugin == "hparams":
            listed = stub.ListTensors(_request(pb.ListTensorsRequest, plugin, run, downsample=False))
            for r in listed.runs:
                if r.run_name == run:
                    for t in r.tags:
                        loaded.hparams[t.tag_name] = t.metadata.summary_metadata.plugin_data.content
                        loaded.saw(t.metadata.max_wall_time)
        else:  # not mapped: count every point, of whichever data class the plugin's series have
            kind = _NOT_MAPPED.get(plugin, f"tensorboard plugin {plugin}")
            for read_kind in (scalars, tensors, blobs):
                for entry in read_kind(plugin):
                    d = entry.data
                    if len(d.step):
                        loaded.unmapped[kind] += len(d.step)
                        loaded.saw(max(d.wall_time))


def read_all_scalars(location: str) -> int:
    """Every scalar point of the logdir at ``location`` read through TensorBoard's data server
    alone, nothing downsampled: the number of points. The floor ``read`` is measured against
    (benchmarks/ingest.py)."""
    from tensorboard.data.proto import data_provider_pb2 as pb

    work = Path(tempfile.mkdtemp(prefix="trackstore-tb-"))
    try:
        with _server(Path(location), ["scalars"], work) as server:
            req = pb.ReadScalarsRequest()
            req.plugin_filter.plugin_name = "scalars"
            req.downsample.num_points = ALL_POINTS
            res = server.stub.ReadScalars(req)
            return sum(len(t.data.value) for r in res.runs for t in r.tags)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------- EventAccumulator
class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a malformed log call must not stop the read
            pass


@contextmanager
def _tensorboard_log() -> Iterator[list[str]]:
    """TensorBoard's log while reading: its event file loader reports a record that fails its
    checksum only at debug level ("Truncated record in ...")."""
    from tensorboard.util import tb_logging

    logger = tb_logging.get_logger()
    handler = _Collect()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _preempted(events: list) -> list:
    """TensorBoard's preemption rule (the data server's reservoir): a point at step ``s`` drops
    the kept points at steps ``>= s``, so a series keeps strictly increasing steps."""
    kept: list = []
    for e in events:
        while kept and kept[-1].step >= e.step:
            kept.pop()
        kept.append(e)
    return kept


def _read_with_accumulator(folder: Path, files: list[Path], framing: _Framing) -> _Loaded:
    import numpy as np
    import tensorboard
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    framing.walk()
    loaded = _Loaded(reader=f"EventAccumulator (tensorboard {tensorboard.__version__})")
    acc = pea.EventAccumulator(str(folder), size_guidance={pea.TENSORS: 0}, purge_orphaned_data=False)
    with _tensorboard_log() as messages:
        acc.Reload()
    for msg in messages:  # "Truncated record in <file> (b'<file>' failed event crc32 check)"
        m = _LOADER_DATA_LOSS.match(msg)
        if m and "crc32" in m.group(2):
            why = re.sub(r"^b?'[^']*'\s*", "", m.group(2))
            loaded.problems.append(f"{m.group(1)}: a record {why}; TensorBoard's EventAccumulator read the records "
                                   f"before it and stopped reading the file there")
    tags = acc.Tags()
    for tag in tags[pea.TENSORS]:  # graphs and run metadata come as tensors too (TensorBoard migrates them)
        md = acc.SummaryMetadata(tag)
        plugin = md.plugin_data.plugin_name
        events = _preempted(acc.Tensors(tag))
        for e in events:
            loaded.saw(e.wall_time)
        if plugin == "scalars":
            steps, walls, values = [], [], []
            for e in events:
                arr = tensor_util.make_ndarray(e.tensor_proto)
                if arr.ndim != 0 or arr.dtype.kind not in "fiub":
                    loaded.unmapped["scalar that is not a number"] += 1
                    continue
                steps.append(e.step)
                walls.append(e.wall_time)
                values.append(float(arr.item()))
            loaded.scalars[tag] = (np.asarray(steps, np.int64), np.asarray(walls, np.float64),
                                   np.asarray(values, np.float64))
        elif plugin in ("histograms", "text"):
            loaded.tensors.setdefault(plugin, {})[tag] = [
                (int(e.step), float(e.wall_time), tensor_util.make_ndarray(e.tensor_proto)) for e in events]
        elif plugin == "hparams":
            loaded.hparams[tag] = md.plugin_data.content
        elif events:
            loaded.unmapped[_NOT_MAPPED.get(plugin, f"tensorboard plugin {plugin or '(none)'}")] += len(events)
    try:  # the file version record's time: the run's start unless a point is older (as the data server has it)
        loaded.start_time = acc.FirstEventTimestamp()
    except ValueError:
        pass
    return loaded
