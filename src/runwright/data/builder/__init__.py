"""Building a dataset: recipe -> partitions -> dedup, split, tokenizer, shards -> a sealed folder.

`recipe` (what to build), `sources` (input readers), `partitions` (the parallel, resumable
read/clean/hash unit), `clean`, `dedup` and `tokenizer` (what the build computes), `pipeline`
(`build_dataset`: assembles the partitions and seals the manifest), `megatron` (import and export
of Megatron-LM corpora), `progress`.
"""
