"""Building a dataset: recipe -> partitions -> stages -> a sealed, content-addressed folder.

`recipe` (what to build), `sources` (input readers), `partitions` (the parallel, resumable
read/clean/hash unit), `stages` (each stage with its parameters, counters and lineage record),
`clean`, `dedup` and `tokenizer` (what the stages compute), `pipeline` (`build_dataset`: runs
them and seals the manifest), `megatron` (import and export of Megatron-LM corpora), `progress`.
"""
