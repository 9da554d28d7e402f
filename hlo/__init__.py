"""The HLO-like IR: data structures, text printer and parser, verifier, reference interpreter."""
