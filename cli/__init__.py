"""The ``trackstore`` command line (installed as ``trackstore.cli``). Thin: parse, call, render."""
