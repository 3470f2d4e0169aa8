"""The largest spec a loader reads and the largest number each field accepts.

Every bound is far beyond any real run, so it never refuses a job someone means to train; it is
there so a typo or a hostile file (2**70 samples per step, a YAML alias bomb, a list nested ten
thousand deep) ends in a SpecError naming the field instead of a hang, a RecursionError or an
overflow in a derivation. Each derivation in `resolve.py` then runs in time bounded by these
numbers (the slowest is a divisor search, O(sqrt(n)) for n <= MAX_BATCH_SAMPLES).
"""

MAX_SPEC_BYTES = 8 * 2**20
"""Largest spec file read: 8 MiB. A full spec is a few KiB; the rest is room for long args."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists in a spec file. The deepest field of the spec itself
(`recovery.policies.<class>.max_retries`) sits 3 levels down."""
MAX_VALUES = 100_000
"""Most values (scalars, lists, mappings) one spec may hold once YAML aliases are expanded: a
billion-laughs file stops here instead of expanding to 10**9 strings."""
MAX_PROBLEMS_SHOWN = 20
"""Problems listed one per line in a SpecError; the rest are counted."""
MAX_REPR_CHARS = 80
"""Longest echo of a refused value in a problem line."""

MAX_STEPS = 10**9
"""Optimizer steps (and step counts: warm-up, intervals). Published LLM runs take ~10**6."""
MAX_BATCH_SAMPLES = 2**24
"""Sequences per optimizer step (16,777,216); large LLM runs use ~10**4 (4M tokens / 2048)."""
MAX_BATCH_TOKENS = 2**36
"""Tokens per optimizer step (~6.9e10); large LLM runs use ~1.6e7."""
MAX_SEQUENCE_LENGTH = 2**24
"""Tokens per sequence (16M); long-context models reach ~10**6-10**7."""
MAX_TOKENS = 10**15
"""A token budget: 10**15 is ~30x the largest published pre-training corpora (~3.6e13)."""
MAX_LAYERS = 2**14
"""Transformer blocks (16,384); the deepest published LLMs have ~10**2."""
MAX_WIDTH = 2**20
"""Hidden and feed-forward sizes (1,048,576); the widest published LLMs reach ~10**5."""
MAX_HEADS = 2**16
"""Attention heads."""
MAX_VOCAB = 2**24
"""Vocabulary size (16M ids); published tokenizers have ~10**5-10**6."""
MAX_NODES = 2**16
"""Nodes in one gang (65,536); the largest training clusters have ~10**4-10**5 devices."""
MAX_DEVICES_PER_NODE = 2**10
"""Worker processes per node (1,024); rack-scale domains have ~72 accelerators."""
MAX_WORLD_SIZE = MAX_NODES * MAX_DEVICES_PER_NODE
"""Processes in one run (2**26), and so the largest parallel degree."""
MAX_SEED = 2**63 - 1
"""Seeds must fit a signed 64-bit integer (torch.manual_seed, numpy, the C shuffle kernels)."""
MAX_SECONDS = 366 * 24 * 3600
"""Any duration (timeouts, intervals, back-off, budgets): 31,622,400 s, one leap year. Larger
finite values overflow `time.sleep` and deadline arithmetic."""
MAX_RETRIES = 1000
"""Restarts of one class or in total; back-off doubles per retry, and 2**1000 s still fits a
float before it is capped by backoff_max_seconds."""
MAX_BACKLOG = 1024
"""Bounds of in-process queues and pools (prefetch batches, read workers, async saves)."""
MAX_KEEP = 10**6
"""Checkpoints a retention rule may keep."""
MAX_DEVICE_MEMORY_BYTES = 2**50
"""Memory per device (1 PiB); today's accelerators carry ~2**37 (141 GB)."""
MAX_FLOPS_PER_DEVICE = 1e18
"""Declared peak FLOP/s per device (1 EFLOP/s); today's datasheets give ~2e15 dense."""
MAX_PRICE = 1e6
"""Price of one device-hour."""
MAX_DEVICE_HOURS = 1e9
"""A device-hour budget."""
MAX_PRIORITY = 2**31 - 1
"""Scheduling priority magnitude (a signed 32-bit integer, as schedulers store it)."""
