"""Real workloads for the node agent to manage, each runnable with ``python -m``.

- ``train``: a training-like job; data-loader worker processes do real CPU work per
  batch (decompress, crop, flip, normalise, collate), pipelined with a GPU step (a
  CUDA matmul loop when torch sees a GPU, else a timed wait). Its throughput falls
  with the cores it is given once data preparation is the bottleneck.
- ``membw``: a memory-bandwidth-hungry CPU job (large array copies).
- ``spin``: a job that reports a set rate of progress with almost no CPU.
- ``emulated``: a training or CPU job whose speed follows CODA's performance model for
  what it is really given (cores, co-runners' bandwidth on the node's board), mostly
  asleep: for replays on a test cluster (``coda replay``, docs/replay.md).

All report progress through :mod:`coda.runtime.progress` (``CODA_PROGRESS_FILE``),
print a JSON summary as their last line of standard output, and stop cleanly with
exit status 0 on SIGTERM or SIGINT.
"""
