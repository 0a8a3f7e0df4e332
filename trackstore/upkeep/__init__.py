"""Maintenance jobs over a store: compact, gc, doctor, and bundles (export, verify, import)."""
