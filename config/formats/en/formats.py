"""How the admin shows dates and times: as the approver's pages do, ``2026-12-02 07:53:46 UTC``,
with the time zone named (``T`` is the zone's name, UTC here), rather than English's
"Dec. 2, 2026, 7:53 a.m." without one. Only the display formats; what forms accept is
Django's English default. The approver's templates spell their formats out (docs/ui.md)."""

from __future__ import annotations

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
