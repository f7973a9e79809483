"""Countersign inside the agent stacks people use: one module per stack, each importing its
framework only there (docs/integrations.md)."""

from __future__ import annotations
