"""runwright: turn a PyTorch training program into a run that can be started, observed, recovered
and audited."""

__version__ = "0.1.0"
