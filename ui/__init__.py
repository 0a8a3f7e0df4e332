"""trackstore.ui: the local dashboard (``trackstore ui``), a reader beside the CLI.

It imports only the core (``trackstore`` and ``trackstore.read``/``records``/``store``) and never
writes the store. :mod:`trackstore.ui.data` is its one door to the store; :mod:`trackstore.ui.server`
serves the page under ``static/`` (its chart library, uPlot, is vendored: nothing is fetched at
run time). Needs the ``trackstore[ui]`` extra (Starlette, uvicorn).
"""
