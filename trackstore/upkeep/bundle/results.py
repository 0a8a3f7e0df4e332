"""What an export or an import did: the records the CLI prints (no behaviour here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ExportResult:
    paths: list[Path]
    runs: int
    files: int
    bytes: int
    manifest: dict


@dataclass
class RunImport:
    project: str
    run_id: str
    action: str = "unchanged"  # added | updated | unchanged
    files_added: int = 0
    files_replaced: int = 0
    rows_added: dict[str, int] = field(default_factory=dict)


@dataclass
class ImportResult:
    kind: str
    runs: list[RunImport] = field(default_factory=list)
    cursors_merged: int = 0
    cursors_skipped: list[str] = field(default_factory=list)
    source_host: str | None = None

