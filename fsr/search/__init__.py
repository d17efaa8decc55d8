"""The island search: `loop.run_campaign` is the entry point (ask -> propose -> submit -> poll ->
tell, asynchronous); `state` holds islands, policies and the seen-set and rebuilds them from a
lineage; `island`, `select` and `migrate` are the population mechanics."""
