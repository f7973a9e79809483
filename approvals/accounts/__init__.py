"""Who is acting: the login throttle, lockouts, and people's and groups' changes."""
