"""Signed receipts: the Ed25519 keys (``keys``), the receipt of an allowed or approved call
(``issue``) and the published public keys (``views``); docs/receipts.md."""
