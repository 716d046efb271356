"""Event kinds and constants the simulator's parts share."""

FINISH = 0
TICK = 1  # node control (the eliminator)
SAMPLE = 2  # throughput samples for the job control (the allocator)
LAUNCH = 3  # a started job begins to work (after the start delay)
CYCLE = 4  # a periodic scheduler's next pass (the cycle period)
BUDGET = 5  # a CPU job's harm budget allows more (a queued DNN job may now fit)
EPS = 1e-9
# An interference episode: a DNN job runs this much below its speed from cores
# because of memory-bandwidth pressure (the eliminator's detect/recover times).
EPISODE_LOSS = 0.05
# A watched node unchanged this long, with nothing held by its controls, stops being
# ticked until it changes (Controls._resting); ten minutes, the eliminator's calm_s.
REST_AFTER_S = 600.0
# How the books treat a running job's cpuset changes (Simulator's ``grants``): elastic,
# as CODA's node agent (narrowed-away cores are free at once), or fixed, as Slurm's
# (a job holds its grant until it ends).
GRANTS = ("elastic", "fixed")
