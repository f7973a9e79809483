"""Date formats for Django's own pages (the admin): ``FORMAT_MODULE_PATH`` in settings."""
