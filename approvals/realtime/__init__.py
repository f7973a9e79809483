"""Sockets: consumers, routing, origin checks, the pub/sub hub, pushes after commit,
queue updates and presence."""
