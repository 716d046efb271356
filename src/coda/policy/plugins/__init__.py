"""Generic plugins for the scheduling cycle, one idea per file: any policy may use them
(CODA's and the baselines' are assembled in coda.py and baselines.py)."""
