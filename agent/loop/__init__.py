"""The loop that drives a model: its turns and tools (agent), the budget, the prices, the ledger
of attempts and the model providers (models)."""
