"""A study's setup and its runs, above the simulator: ``config`` (RunConfig: the trace,
cluster and workload, with the policy's and the simulator's options nested, each
checked once; light to import), ``clusters`` (``--cluster``'s names and specs to a
ClusterSpec) and ``run`` (a config to a prepared workload, and a prepared workload and
a policy to a Simulator's result). Experiments, the replay's twins, the CLI, tests and
benchmarks build their runs here; ``coda.sim`` never imports it."""
