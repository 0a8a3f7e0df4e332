"""The module verl's plugin loader imports (entry point group ``verl.plugins``, name ``trackstore``).

verl >= 0.9 imports every ``verl.plugins`` entry point at ``import verl``, in every process it
starts, and swallows their errors at debug level; so importing this module installs the
integration and reports a failure as a visible warning instead. It also pins the store root to
an absolute path in the environment (``$TRACKSTORE_DIR``, default ``./tsruns`` of the launching
directory) before verl starts Ray, so every Ray worker, whatever its working directory, writes
into the same store. Set ``VERL_USE_EXTERNAL_PLUGINS=none`` to keep it out.
"""

from __future__ import annotations

import logging
import os

from trackstore.store.layout import ENV_ROOT, resolve_root

os.environ.setdefault(ENV_ROOT, str(resolve_root()))

try:
    from trackstore.integrations.verl import install as _install

    _install()
except Exception as _exc:  # pragma: no cover - reported, never fatal to verl
    logging.getLogger("trackstore.verl").warning("trackstore: verl integration not installed: %s", _exc)
