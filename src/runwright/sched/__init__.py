"""The scheduler's pure core: the inventory of nodes, and admission of gangs onto it.

inventory.py       nodes, devices, topology labels, health (records)
sources.py         this host and a YAML inventory file
slurm_inventory.py a Slurm cluster's nodes, from `scontrol show node --oneliner`
requests.py        pending gang requests, running gangs, project quotas (records)
admission.py       one pass: decisions in queue order, under a registered policy
pass_state.py      the state a pass walks the queue with
pass_records.py    a pass's options, outcomes and reservations (records)
preemption.py      a pass's searches over running gangs: victims, reservations
free_counts.py     arithmetic on free device counts per node
inventory_index.py what a pass derives from the inventory, kept for the next
placement.py       best-fit placement under topology constraints, and why none exists
baseline.py        first-fit placement for the FIFO baseline
quota.py           quotas, borrowing and reclaim
reasons.py         pending reasons: code, figures, words

Nothing here imports torch, the store or the controller: the controller calls `admit` with what
its records say, and carries the decisions out through its executors.
"""
