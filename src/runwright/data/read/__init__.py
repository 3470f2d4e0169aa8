"""Reading a dataset: the deterministic, resumable loader and the algorithms it runs.

`loader` (`DataLoader`), `step_plan` (which documents make each rank's rows of a step),
`prefetch` (read workers, the reorder buffer and the prefetch bound), `stream` (the logical
document sequence), `shuffle`, `mixture` and `packing` (versioned algorithms), `rows` and
`batch` (filling a step's arrays), `cursor` and `ledger` (resume state and consumption record),
`kernels` (the compiled loops in `csrc/`, module `_kernels`).
"""
