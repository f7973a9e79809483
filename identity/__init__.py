"""Single sign-on with OpenID Connect, and the login pages' choice of password or SSO
(docs/identity.md)."""
