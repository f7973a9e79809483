"""Plumbing that replaces or reaches into a stock component, for speed or safety.

config/runtime/README.md lists each piece, what it replaces and why, the private or
undocumented APIs it relies on with the versions checked, and its switch back to the stock
component (``COUNTERSIGN_STOCK``).
"""
