"""The on-disk format: every path and folder name, run.json, part files, locks, the sync ledger.

Nothing here imports the layers above it (write, records, read, upkeep, sync, cli).
"""
