"""What every layer of kagent may import: the error users see, where kagent keeps things on disk,
and the conversation's provider-neutral types. It imports nothing else of kagent."""
