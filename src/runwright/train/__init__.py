"""The reference trainer: a small GPT trained only through runwright's public APIs.

Run it under the control plane (`runwright submit examples/tiny_gpt.yaml`) or plain torchrun
(`torchrun --nproc-per-node 2 -m runwright.train --spec examples/tiny_gpt.yaml`).
"""

from runwright.train.model import GPT

__all__ = ["GPT"]
