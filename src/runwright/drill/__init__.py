"""Fault drills (`runwright drill`, docs/drill.md): a matrix of faults injected from outside into
real runs of one spec, each measured (detection, class, action, RPO, RTO, bitwise equality with a
fault-free reference, the replay check) against what the spec's recovery policy calls for.

The matrix (faults.py) and its injectors (injectors.py), the drivers of a run (drivers.py), the
drill itself (runner.py), what a fault's run came to (outcome.py) and drill.html (page.py).
"""
