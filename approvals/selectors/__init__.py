"""Reads, one module per concern (docs/architecture.md): the call state the API and pushes
send, who may decide, ledger totals, the stored rules, each page's view model."""
