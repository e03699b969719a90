"""The agent: a run's settings and how it ends (this package's own modules, which every part
of it reads), what a run keeps on disk (storage), the loop that drives a model (loop), a run
from start to end (lifecycle), and the command line (cli)."""
