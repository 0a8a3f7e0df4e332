"""The CLI reference is generated from --help and must not drift; every command and option has help."""

from pathlib import Path

from tests.helpers import REPO


def test_every_command_and_option_has_help():
    from trackstore.cli.docgen import missing_help

    assert missing_help() == []


def test_cli_reference_is_current():
    from trackstore.cli.docgen import render

    assert (REPO / "docs" / "cli.md").read_text() == render(), (
        "docs/cli.md is stale: run `python -m trackstore.cli.docgen > docs/cli.md`")


def test_docs_exist_for_every_topic():
    for name in ("quickstart", "concepts", "format", "architecture", "records", "sql", "sync", "cron", "gc",
                 "airgap", "integrations", "performance", "cli", "ingest"):
        assert (Path(REPO) / "docs" / f"{name}.md").exists(), name
