"""Drop-in replacements for other trackers' client APIs, opt-in only.

* :mod:`trackstore.compat.wandb` — ``import trackstore.compat.wandb as wandb``, or
  ``trackstore run -- python train.py`` to give an unmodified script the drop-in.

See docs/integrations.md.
"""
