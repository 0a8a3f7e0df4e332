"""The one module that owns every Arrow schema of the store, and the on-disk format version.

Each record kind (``metrics``, ``samples``, ``spans``, ``histograms``, ``artifacts``, ``images``) has one
schema. Every part file carries ``trackstore.schema_version`` and ``trackstore.kind`` in its
Parquet key-value metadata; a reader refuses files whose version is newer than it knows, and
schemas evolve only by appending nullable columns (readers use ``union_by_name``), so files
written by older versions stay readable forever. The spec is ``docs/format.md``.

Two columns are common to every kind and are what sync resumes on:

* ``writer`` — the id of the process that wrote the row (also in the part file's name), and
* ``seq`` — a per-(writer, kind) sequence number, dense from 0.

``(writer, seq)`` identifies a row for ever: compaction merges files but keeps both columns,
so sync cursors, which are sets of acknowledged ``(writer, seq)`` ranges, stay valid.
"""

from __future__ import annotations

import pyarrow as pa

from .vocab import KINDS, Kind

SCHEMA_VERSION = 2  # 2: metrics parts gained last_of_key (docs/format.md, section 6)
FORMAT_KEY = b"trackstore.schema_version"
KIND_KEY = b"trackstore.kind"

TS_TYPE = pa.timestamp("us", tz="UTC")

_COMMON = [
    pa.field("writer", pa.string(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
]
ROW_ID_COLUMNS = tuple(f.name for f in _COMMON)  # ("writer", "seq"): a row's identity for ever

METRICS = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=True),
        pa.field("ts", TS_TYPE, nullable=False),
        *_COMMON,
        # True on the row logged last (largest ts, seq) of its key in this file; those rows form
        # the file's last row group. Derived by write_part (trackstore.store.last_rows); NULL in parts
        # written before it existed.
        pa.field("last_of_key", pa.bool_(), nullable=True),
    ]
)

# How part files store ``key``: dictionary-encoded, so the writer hands Parquet integer codes
# and the key names once, instead of a million strings to hash again. In Parquet it is a plain
# UTF-8 string column with dictionary pages; pyarrow reads it back as this dictionary type,
# DuckDB and trackstore.read.reader as a string.
KEY_TYPE = pa.dictionary(pa.int32(), pa.string())
METRICS_FILE = pa.schema([f.with_type(KEY_TYPE) if f.name == "key" else f for f in METRICS])

# What a metrics row is logged with: the file's columns minus the ones write_part derives.
METRIC_POINTS = METRICS.remove(METRICS.get_field_index("last_of_key"))

# Samples: one row per generation (validation outputs, rollout completions). ``input`` and
# ``output`` hold text as given; a non-text value (a chat message list, a dict) is stored as JSON
# text and its column name is listed in ``json_fields``. Every other user field (reward
# components, ground truth, token counts, group ids...) goes into ``extra``, a JSON object, so
# the schema stays fixed whatever users log. ``sample_index`` counts per (step, split) across
# calls unless the row gives its own. Written by trackstore.records.samples.
SAMPLES = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("sample_index", pa.int64(), nullable=False),
        pa.field("input", pa.string(), nullable=True),
        pa.field("output", pa.string(), nullable=True),
        pa.field("score", pa.float64(), nullable=True),  # NaN kept; NULL when not given
        pa.field("extra", pa.string(), nullable=True),  # JSON object of the other fields
        pa.field("json_fields", pa.list_(pa.string()), nullable=True),  # of "input", "output"
        pa.field("ts", TS_TYPE, nullable=False),
        *_COMMON,
    ]
)

# Spans: trajectories as span trees. The root span of a trace has parent_span_id NULL and
# carries the trace-level ``reward`` and the trace's user attributes; every span of a trace
# repeats step, sample_index, rollout_n and validate so filters need no join. A span may have
# two rows: an ``unfinished`` checkpoint (written only while it stays open across a flush, so
# a killed process leaves a trace of it) and its final row (ok | error). Readers keep one row
# per (trace_id, span_id): the final one if present, else the checkpoint (see docs/records.md).
# inputs/outputs/attributes are JSON text (NaN and Infinity allowed). Written by trackstore.records.trace.
SPANS = pa.schema(
    [
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("span_id", pa.string(), nullable=False),
        pa.field("parent_span_id", pa.string(), nullable=True),
        pa.field("name", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("step", pa.int64(), nullable=True),
        pa.field("sample_index", pa.int64(), nullable=True),
        pa.field("rollout_n", pa.int64(), nullable=True),
        pa.field("validate", pa.bool_(), nullable=True),
        pa.field("reward", pa.float64(), nullable=True),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=True),
        pa.field("status", pa.string(), nullable=False),  # ok | error | unfinished
        pa.field("error", pa.string(), nullable=True),
        pa.field("inputs", pa.string(), nullable=True),  # JSON
        pa.field("outputs", pa.string(), nullable=True),  # JSON
        pa.field("attributes", pa.string(), nullable=True),  # JSON object
        pa.field("ts", TS_TYPE, nullable=False),
        *_COMMON,
    ]
)

HISTOGRAMS = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("edges", pa.list_(pa.float64()), nullable=False),
        pa.field("counts", pa.list_(pa.float64()), nullable=False),
        pa.field("min", pa.float64(), nullable=True),
        pa.field("max", pa.float64(), nullable=True),
        pa.field("mean", pa.float64(), nullable=True),
        pa.field("std", pa.float64(), nullable=True),
        pa.field("count", pa.int64(), nullable=False),  # finite values binned
        pa.field("nan_count", pa.int64(), nullable=True),  # NaN values seen (not binned)
        pa.field("inf_count", pa.int64(), nullable=True),  # +-inf values seen (not binned)
        pa.field("ts", TS_TYPE, nullable=False),
        *_COMMON,
    ]
)

# Artifacts: one row per file of an artifact version (the manifest, queryable). The files sit
# at ``path`` (relative to the run folder), copied at log time; ``digest`` identifies the
# version's content, so logging identical content again reuses the version. Written by
# trackstore.records.artifacts, which also keeps ``artifacts/<name>/v<N>/manifest.json`` on disk.
ARTIFACTS = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("digest", pa.string(), nullable=False),  # sha256 over the version's files
        pa.field("path", pa.string(), nullable=False),  # relative to the run folder
        pa.field("logical_path", pa.string(), nullable=False),  # path inside the artifact
        pa.field("size", pa.int64(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
        pa.field("aliases", pa.list_(pa.string()), nullable=True),
        pa.field("metadata", pa.string(), nullable=True),  # JSON object
        pa.field("step", pa.int64(), nullable=True),
        pa.field("ts", TS_TYPE, nullable=False),
        *_COMMON,
        # appended later (nullable: older parts read NULL, which means "copy" and "file")
        pa.field("storage", pa.string(), nullable=True),  # "copy" or "reference" (path is then absolute)
        pa.field("event", pa.string(), nullable=True),  # "file" (a file of a version) or "alias" (a move)
    ]
)

# Images: one row per image logged (``run.log({"key": trackstore.Image(...)})``; a list of images
# at one key gives one row each, numbered by ``index``). The bytes are a file of the run folder,
# ``path`` = ``media/<sha256[:2]>/<sha256>.<png|jpg>``, content-addressed (the same bytes are one
# file) and written before the row is buffered. A PNG or JPEG file logged by path keeps its exact
# bytes; arrays and PIL images are encoded as PNG. Written by trackstore.records.images.
IMAGES = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("index", pa.int64(), nullable=False),  # position in a list logged at (step, key)
        pa.field("path", pa.string(), nullable=False),  # relative to the run folder
        pa.field("sha256", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("width", pa.int64(), nullable=False),
        pa.field("height", pa.int64(), nullable=False),
        pa.field("format", pa.string(), nullable=False),  # png | jpeg
        pa.field("caption", pa.string(), nullable=True),
        pa.field("ts", TS_TYPE, nullable=False),
        *_COMMON,
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    Kind.METRICS: METRICS,
    Kind.SAMPLES: SAMPLES,
    Kind.SPANS: SPANS,
    Kind.HISTOGRAMS: HISTOGRAMS,
    Kind.ARTIFACTS: ARTIFACTS,
    Kind.IMAGES: IMAGES,
}

# KINDS (trackstore.store.vocab, also trackstore.store.layout.KINDS): the kinds of SCHEMAS, in its order
if tuple(SCHEMAS) != KINDS:  # pragma: no cover - one schema per kind, in the format's order
    raise AssertionError(f"trackstore.store.vocab.KINDS {KINDS} != {tuple(SCHEMAS)}")

# Each kind's rows as they are logged and as readers return them: the file schemas minus the
# columns write_part derives (metrics' last_of_key, an index for the latest view).
ROWS: dict[str, pa.Schema] = {**SCHEMAS, Kind.METRICS: METRIC_POINTS}

# Parquet writer settings per kind. Monotonic integers are delta-encoded and floats are
# byte-stream-split before zstd: together they keep noisy float64 metrics near 9 bytes/point.
_DELTA = "DELTA_BINARY_PACKED"
ENCODINGS: dict[str, dict[str, str]] = {
    Kind.METRICS: {"step": _DELTA, "seq": _DELTA, "ts": _DELTA, "value": "BYTE_STREAM_SPLIT"},
    Kind.SAMPLES: {"seq": _DELTA, "ts": _DELTA, "sample_index": _DELTA},
    Kind.SPANS: {"seq": _DELTA, "ts": _DELTA},
    Kind.HISTOGRAMS: {"seq": _DELTA, "ts": _DELTA},
    Kind.ARTIFACTS: {"seq": _DELTA},
    Kind.IMAGES: {"seq": _DELTA, "ts": _DELTA},
}

# Columns of free text (what a model read and wrote, JSON): zstd keeps them 1.2-1.5x smaller
# than snappy, so they are zstd in every part; every other column of a small part is snappy
# (trackstore.store.parts.codecs: the encodings above have already shrunk it).
TEXT_COLUMNS: dict[str, tuple[str, ...]] = {
    Kind.SAMPLES: ("input", "output", "extra"),
    Kind.SPANS: ("error", "inputs", "outputs", "attributes"),
    Kind.ARTIFACTS: ("metadata",),
    Kind.IMAGES: ("caption",),
}


def with_metadata(schema: pa.Schema, kind: str) -> pa.Schema:
    return schema.with_metadata({FORMAT_KEY: str(SCHEMA_VERSION).encode(), KIND_KEY: kind.encode()})


def file_version(metadata: dict | None) -> int | None:
    """The schema version recorded in a Parquet file's key-value metadata (None if absent)."""
    if not metadata or FORMAT_KEY not in metadata:
        return None
    try:
        return int(metadata[FORMAT_KEY])
    except ValueError:
        return None
