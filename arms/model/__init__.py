"""The recurrent model: surgery over a base's layers, bridges, the recurrent forward, parameter budgets."""
