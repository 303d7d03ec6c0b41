"""Seed-compatible entry points (kept with the seed's names on purpose)."""
