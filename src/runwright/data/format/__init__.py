"""The dataset and its format: what a built dataset folder holds and how it is checked.

`manifest` (the content-addressed record, `dataset_id`), `indexed_shard` (one Megatron-LM
`.bin`/`.idx` pair: reader and writer), `shard_set` (a dataset's size-bounded shards),
`pretokenized` (a dataset folder from token ids), `dataset` (opening a folder or URL, integrity
checks, the local cache), `report` (`runwright data inspect|verify`).
"""
