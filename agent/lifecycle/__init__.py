"""A run from its start to its end: starting one, resuming it from its trace, re-executing it to
audit its numbers, and the device it runs on."""
