"""`runwright demo`: the walking skeleton of one run (grows into the full demo with issue 6)."""
