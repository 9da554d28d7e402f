"""Expanders: ops rewritten into ops the backend lowers (argmax/argmin as two reductions, ...)."""
