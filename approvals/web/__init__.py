"""The approver surface: pages, forms, urls, page view models, CSP and the manifest."""
