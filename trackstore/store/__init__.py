"""The on-disk format: every path and folder name, part files, run.json, locks, the sync ledger.

``layout`` (paths, names, the relist policy), ``names``, ``schema``, ``atomic``, ``parts``
(write, read, conform, check part files), ``merge`` (merge parts, swap a kind folder),
``meta`` (run.json, writer files), ``clock``, ``host``, ``locks``, ``ledger`` (sync cursors),
``redact``, ``ranges`` and small helpers. Nothing here imports the layers above it (write,
records, read, upkeep, integrations, compat, sync, cli).
"""
