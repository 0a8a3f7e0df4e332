"""Integrations with training frameworks; each module imports its framework only when imported.

* :mod:`trackstore.integrations.verl` — the ``trackstore`` logger and rollout-trace backend of
  verl, installed in every verl process by the ``verl.plugins`` entry point
  (:mod:`trackstore.integrations.verl_plugin`); :mod:`trackstore.integrations.verl_runs` is the
  run its worker processes join, shared by the logger and the trace backend.
* :mod:`trackstore.integrations.transformers` — ``TrackstoreCallback`` for Transformers and TRL.
* :mod:`trackstore.integrations.lightning` — ``TrackstoreLogger`` for PyTorch Lightning.
* :mod:`trackstore.integrations.watch` — ``trackstore.watch(model)``: gradient and parameter
  histograms of a PyTorch module.

See docs/integrations.md.
"""
