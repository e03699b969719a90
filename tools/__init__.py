"""What the model can call during a run: file, shell, compile, check, benchmark, profile tools."""
