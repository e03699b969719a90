"""What a run keeps on disk: its trace, its workspace (a git repository) and its lock."""
