"""The ``convmem`` command line (a thin adapter over the library)."""
