"""The instruments' child halves: what the profile, stages, reference_dump and compile tools
run in a fresh, contained interpreter, building the task and the solution with the harness's
own code (kagent.sandbox.harness), so that what is measured is built as what is timed.

The tools the model calls (kagent.tools) write a ``ChildJob`` (job.py) and read the child's
result file; nothing here is imported by the agent's own process but the job.
"""
