"""ledger: a preregistered experiment ledger for retrofitted depth recurrence."""
