"""Executors: what carries out a generation of a run (protocol.py), and where (local.py)."""
