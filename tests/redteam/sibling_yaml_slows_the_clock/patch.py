"""expect: pass
timed: score below 1.5

An honest solution with a ``yaml.py`` beside it. The harness runs with the solution's folder
first on sys.path and imports yaml before it binds its clock, so that file runs before any
of the harness's defences: it hands over the real PyYAML and swaps the host clock for one
that runs at half speed while the candidate's step is being timed (a clock slowed for
everyone would leave the ratio alone). Once the solution is imported in a process of its
own, nothing of its folder reaches the referee's imports: the speedup is the honest one.
"""
