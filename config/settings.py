"""Django settings. Every value that varies between installations comes from the environment,
read here and nowhere else (see the Settings table in README.md)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url

from approvals.receipts.keys import receipt_keys_load
from config.env import (
    email_settings,
    env_bool,
    env_choices,
    env_int,
    env_list,
    env_rate,
    env_str,
    outbound_proxies,
    redis_channel_layer,
    secret_key,
)
from config.private_files import (
    private_directory,
    private_files,
    private_sqlite,
    sqlite_file,
)
from config.runtime.stock import Stock
from identity.config import sso_settings

BASE_DIR = Path(__file__).resolve().parent.parent
# What Countersign keeps on disk (the embedded database, the secret key, static files), private
# to the user it runs as (config/private_files.py): created 0700, its files tightened to 0600.
VAR_DIR = Path(env_str("COUNTERSIGN_VAR_DIR", "") or BASE_DIR / "var").resolve()
private_directory(VAR_DIR)
private_files(VAR_DIR)

SECRET_KEY = secret_key(VAR_DIR / "secret_key")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    # First, so that its runserver (the project's ASGI server, config/serve.py, under Django's
    # autoreloader) is the one manage.py finds, before staticfiles' WSGI one.
    "config",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    # Listed so /api/v1/docs serves its assets locally instead of from a CDN.
    "ninja",
    # Before approvals, whose admin replaces axes' admin of access attempts.
    "axes",
    "approvals",
    "notifications",
    "identity",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "approvals.web.csp.content_security_policy",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "approvals.accounts.actor.acting_request",  # who acted, for the entries written from signals
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "approvals.api.middleware.api_errors_as_json",
    # A query string no page can use is a 400 page, never a 500 or a traceback page.
    "approvals.web.querystring.QueryStringCheck",
    # Last, as axes asks: turns a locked-out login's response into the lockout page.
    "axes.middleware.AxesMiddleware",
]

# First the login throttle, which refuses a locked-out username and address before any
# password is checked (approvals/accounts/throttle.py); then Django's own, for passwords; then
# single sign-on's (identity/backends.py), which takes no password.
PASSWORD_BACKEND = "django.contrib.auth.backends.ModelBackend"  # noqa: S105 (a class)
AUTHENTICATION_BACKENDS = [
    "approvals.accounts.throttle.LoginThrottle",
    PASSWORD_BACKEND,
    "identity.backends.SsoBackend",
    # Signs nobody in by itself: the passkey ceremony logs the person in through it.
    "identity.backends.PasskeyBackend",
]

# Messages stay on the server: admin shows a new API token once through one.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Runtime plumbing -----------------------------------------------------------------------
# The pieces of config/runtime/ switched back to the stock components they replace, slower
# (config/runtime/README.md): a comma-separated list of Stock's values, or "all".
COUNTERSIGN_STOCK = frozenset(Stock(piece) for piece in env_choices("COUNTERSIGN_STOCK", Stock))
# What each server process's expiry sweep runs once a second (config/runtime/sweeper.py).
COUNTERSIGN_SWEEP = "approvals.services.lifecycle.calls_expire_due"

# --- Database -------------------------------------------------------------------------------
# No persistent connections under ASGI: sockets, long-polls and the sweep read from threads
# of their own besides the request threads, so a kept connection would be one per thread.
# PostgreSQL gets psycopg's pool instead, and SQLite a pool of its own
# (config/runtime/sqlite_pooled).
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=0,
    )
}
on_sqlite = DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
# The SQLite database file, private wherever it is (None: PostgreSQL, or SQLite in memory).
SQLITE_DATABASE = sqlite_file(DATABASES["default"]["NAME"]) if on_sqlite else None
if on_sqlite:
    if Stock.SQLITE not in COUNTERSIGN_STOCK:
        DATABASES["default"]["ENGINE"] = "config.runtime.sqlite_pooled"
    if SQLITE_DATABASE is not None:
        # Created 0600 before SQLite makes it with the umask's mode; its -wal and -shm follow.
        private_sqlite(SQLITE_DATABASE)
    DATABASES["default"]["OPTIONS"] = {
        # IMMEDIATE takes the write lock at BEGIN, so a check-then-record transaction cannot
        # be overtaken between its read and its write; the long timeout lets 200 racing
        # submissions queue up instead of failing with "database is locked".
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # File-backed, so threads and server processes in tests share it; one file per test run
    # (child processes inherit the suffix), so two runs at once do not delete each other's.
    run = os.environ.setdefault("COUNTERSIGN_TEST_RUN", str(os.getpid()))
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-db-{run}.sqlite3")}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # psycopg's pool, per process. Its default of 4 connections is easily exhausted by a worker
    # serving sync views, long-poll reads and the expiry sweep at once.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2,
        "max_size": 20,
        "timeout": 10,
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels -------------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": redis_channel_layer(REDIS_URL, stock=Stock.LAYER in COUNTERSIGN_STOCK)
    }
elif Stock.LAYER in COUNTERSIGN_STOCK:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "config.runtime.memory_layer.ThrottledInMemoryChannelLayer"}
    }

# --- Security -------------------------------------------------------------------------------
COUNTERSIGN_HTTPS = env_bool("COUNTERSIGN_HTTPS", False)
SECURE_SSL_REDIRECT = COUNTERSIGN_HTTPS
# Database sessions, not cached_db: a per-process cache would keep a signed-out session alive
# on the other workers.
SESSION_ENGINE = "django.contrib.sessions.backends.db"
SESSION_COOKIE_SECURE = COUNTERSIGN_HTTPS
CSRF_COOKIE_SECURE = COUNTERSIGN_HTTPS
SECURE_HSTS_SECONDS = 31_536_000 if COUNTERSIGN_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = COUNTERSIGN_HTTPS
SECURE_HSTS_PRELOAD = COUNTERSIGN_HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if COUNTERSIGN_HTTPS else None
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# --- Logins ---------------------------------------------------------------------------------
# django-axes (approvals/accounts/lockouts.py): this many failed logins for one username from one
# client address, each within the lockout of the one before, lock that pair out for the lockout's
# minutes from the last counted failure; attempts while locked out are refused unchecked and
# do not extend it. Admin lifts a lockout by deleting its access attempt.
COUNTERSIGN_LOGIN_FAILURES = env_int("COUNTERSIGN_LOGIN_FAILURES", 5, minimum=1, maximum=1000)
COUNTERSIGN_LOGIN_LOCKOUT_MINUTES = env_int(
    "COUNTERSIGN_LOGIN_LOCKOUT_MINUTES", 15, minimum=1, maximum=10_080
)
AXES_FAILURE_LIMIT = COUNTERSIGN_LOGIN_FAILURES
AXES_COOLOFF_TIME = timedelta(minutes=COUNTERSIGN_LOGIN_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "approvals.accounts.lockouts.lockout_response"
# The client's address is REMOTE_ADDR: the peer's, or the one a trusted proxy names
# (COUNTERSIGN_FORWARDED_ALLOW_IPS, applied by the server). Never a header anyone can send
# (as django-ipware would read, if installed), or a guesser would pick a new address each time.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)
# Password reset requests per email address, and as many per client address (N/s, N/m, N/h;
# 0 turns it off): one over either sends no mail and is answered as any other
# (approvals/accounts/throttle.py). The mail's link starts with COUNTERSIGN_PUBLIC_URL.
COUNTERSIGN_PASSWORD_RESET_RATE = env_rate("COUNTERSIGN_PASSWORD_RESET_RATE", "5/h")

# --- Single sign-on (identity/, docs/identity.md) -------------------------------------------
# Off (0): neither login page has a password form and a posted password is refused (403); the
# password backend is dropped, which also ends the sessions passwords opened. Needs SSO.
COUNTERSIGN_PASSWORD_LOGIN = env_bool("COUNTERSIGN_PASSWORD_LOGIN", True)
if not COUNTERSIGN_PASSWORD_LOGIN:
    AUTHENTICATION_BACKENDS.remove(PASSWORD_BACKEND)
# OpenID Connect: the issuer (its discovery document is read at first use, and again every few
# minutes; /readyz reports one that cannot be read), the client registered there, the button's
# label, the claim naming the person's groups and the scopes asked for. No issuer: no SSO.
_sso = sso_settings(password_login=COUNTERSIGN_PASSWORD_LOGIN)
OIDC_ISSUER = _sso.issuer
OIDC_CLIENT_ID = _sso.client_id
OIDC_CLIENT_SECRET = _sso.client_secret
OIDC_NAME = _sso.name
OIDC_GROUPS_CLAIM = _sso.groups_claim
OIDC_SCOPES = _sso.scopes
# Hours a session opened by single sign-on lasts, however active: then the person signs in
# again, and their groups are read from the provider again.
COUNTERSIGN_SSO_SESSION_HOURS = env_int("COUNTERSIGN_SSO_SESSION_HOURS", 12, minimum=1, maximum=720)

# --- Static files ---------------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns at every start without it
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# The admin shows dates as the approver's pages do, with the time zone (config/formats/).
FORMAT_MODULE_PATH = ["config.formats"]

# --- Countersign ----------------------------------------------------------------------------
COUNTERSIGN_HOLD_TIMEOUT = env_int("COUNTERSIGN_HOLD_TIMEOUT", 3600, minimum=1, maximum=31_536_000)
COUNTERSIGN_MAX_WAIT = env_int("COUNTERSIGN_MAX_WAIT", 60, minimum=0, maximum=3600)
COUNTERSIGN_MAX_BODY = env_int("COUNTERSIGN_MAX_BODY", 1_048_576, minimum=1024, maximum=1 << 30)
# Seconds a request body may take to arrive in full (config/runtime/body_limit.py): a client
# that declares a body and sends it slowly, or never, is answered 408 and let go.
COUNTERSIGN_BODY_TIMEOUT = env_int("COUNTERSIGN_BODY_TIMEOUT", 30, minimum=1, maximum=3600)
# The proxies whose X-Forwarded-For / X-Forwarded-Proto the server believes (config/serve.py),
# comma-separated addresses or networks; empty, the peer's own address is the client's.
COUNTERSIGN_FORWARDED_ALLOW_IPS = env_list("COUNTERSIGN_FORWARDED_ALLOW_IPS", "")
# Threads of a server process that run requests' synchronous code (views, the ORM), one
# request at a time each (config/runtime/pooled_handler.py; unused with Django's own handler);
# waiting agents hold none. Two at least, so that one slow request (a page, an export) does
# not hold up every other; SQLite's writers take turns anyway (config/runtime/sqlite_writers.py),
# while PostgreSQL's round trips leave the GIL free for more. At most 16, to leave room in
# PostgreSQL's pool of 20 for the sockets, long-polls and the sweep.
COUNTERSIGN_REQUEST_THREADS = env_int(
    "COUNTERSIGN_REQUEST_THREADS",
    2 if on_sqlite else 4,
    minimum=1,
    maximum=16,
)
# Requests that borrow threads of their own instead of the request threads
# (config/runtime/pooled_handler.py): a login hashes its password (PBKDF2, deliberately slow),
# and a dozen clients failing to log in must not keep agents waiting; health
# checks and scrapes answer while every request thread is busy. Each entry: a pool's name, its
# threads, its paths (the login views of config/urls.py and approvals/ops/views.py's routes), and
# its threads' nice value: with the cores all busy, hashing yields them to agents' requests
# (bench/login_bench.py).
COUNTERSIGN_LOGIN_THREADS = env_int("COUNTERSIGN_LOGIN_THREADS", 1, minimum=1, maximum=4)
COUNTERSIGN_PATH_POOLS = [
    ("login", COUNTERSIGN_LOGIN_THREADS, ["/accounts/login/", "/admin/login/"], 10),
    ("ops", 1, ["/healthz", "/readyz", "/metrics"], 0),
]
# The bearer token a Prometheus scrape of /metrics presents; unset, /metrics is a 404.
COUNTERSIGN_METRICS_TOKEN = env_str("COUNTERSIGN_METRICS_TOKEN", "")
# The bearer token a SIEM or monitor presents to /api/v1/audit and /api/v1/audit/head; unset,
# both are a 404 (docs/receipts.md, "The audit chain").
COUNTERSIGN_AUDIT_TOKEN = env_str("COUNTERSIGN_AUDIT_TOKEN", "")
COUNTERSIGN_RATE_LIMIT = env_rate("COUNTERSIGN_RATE_LIMIT", "600/m")
# Open WebSockets per person (queue and call pages) and per agent, counted in each server
# process; one more is closed with 4429 (docs/reliability.md, "Fair sockets").
COUNTERSIGN_MAX_SOCKETS_PER_USER = env_int(
    "COUNTERSIGN_MAX_SOCKETS_PER_USER", 20, minimum=1, maximum=100_000
)
COUNTERSIGN_MAX_SOCKETS_PER_AGENT = env_int(
    "COUNTERSIGN_MAX_SOCKETS_PER_AGENT", 1000, minimum=1, maximum=1_000_000
)
# Adds /bench/bare, the bare async endpoint bench/ compares the agent API with.
COUNTERSIGN_BENCH = env_bool("COUNTERSIGN_BENCH", False)

# --- Notifications: sending (notifications/senders/) -----------------------------------------
# Seconds one attempt at a notification (a webhook, an Apprise service, the mail server) may
# take, from connecting to the answer's end, by the wall clock.
COUNTERSIGN_NOTIFY_TIMEOUT = env_int("COUNTERSIGN_NOTIFY_TIMEOUT", 10, minimum=1, maximum=300)
# Off (0): webhooks and Apprise services are refused at loopback, link-local, private and other
# non-public addresses, checked on the address each connection is opened to
# (notifications/senders/outbound.py). On by default: self-hosted receivers are often local.
COUNTERSIGN_NOTIFY_PRIVATE_TARGETS = env_bool("COUNTERSIGN_NOTIFY_PRIVATE_TARGETS", True)
# Webhooks go through the http:// proxy of HTTPS_PROXY or HTTP_PROXY (by the target's scheme),
# but to the hosts NO_PROXY names; each may be lower-case, which wins. Apprise's services read
# the same variables themselves (through requests); mail never goes through a proxy.
COUNTERSIGN_WEBHOOK_PROXIES = outbound_proxies()
# Mail (email channels, password resets): EMAIL_URL, e.g. smtp://user:password@host:587?tls=1,
# else Django's own EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS,
# EMAIL_USE_SSL, EMAIL_BACKEND. With none, mail is printed to the console under DEBUG (make
# run), and otherwise handed to localhost:25, with a system check's warning where an email
# channel exists (notifications/checks.py).
_email = email_settings(debug=DEBUG)
EMAIL_BACKEND = _email.backend
EMAIL_HOST = _email.host
EMAIL_PORT = _email.port
EMAIL_HOST_USER = _email.user
EMAIL_HOST_PASSWORD = _email.password
EMAIL_USE_TLS = _email.use_tls
EMAIL_USE_SSL = _email.use_ssl
EMAIL_TIMEOUT = COUNTERSIGN_NOTIFY_TIMEOUT
DEFAULT_FROM_EMAIL = SERVER_EMAIL = _email.from_email
COUNTERSIGN_EMAIL_CONFIGURED = _email.configured

# --- Notifications: the outbox and its delivery (notifications/delivery.py) -------------------
# The server's address as approvers reach it, for the link to a call's page in each message;
# also the receipts' issuer ("iss"), where verifiers fetch /.well-known/jwks.json.
COUNTERSIGN_PUBLIC_URL = env_str("COUNTERSIGN_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")

# --- Receipts (docs/receipts.md) -------------------------------------------------------------
# Seconds an allowed or approved call's receipt is valid for: its "exp" is its "iat" plus this.
COUNTERSIGN_RECEIPT_TTL = env_int("COUNTERSIGN_RECEIPT_TTL", 900, minimum=1, maximum=31_536_000)
# The Ed25519 key receipts and audit heads are signed with: a PEM file's path (the same on every
# worker), else one generated on first start into var/signing_key.pem; and the older keys'
# public halves, still published for receipts signed before a rotation. Read here, so that a
# missing, malformed or non-Ed25519 key stops start-up.
COUNTERSIGN_SIGNING_KEY = env_str("COUNTERSIGN_SIGNING_KEY", "").strip()
COUNTERSIGN_VERIFY_KEYS = env_list("COUNTERSIGN_VERIFY_KEYS", "")
COUNTERSIGN_RECEIPT_KEYS = receipt_keys_load(
    signing=COUNTERSIGN_SIGNING_KEY,
    verify=COUNTERSIGN_VERIFY_KEYS,
    default=VAR_DIR / "signing_key.pem",
)

# Seconds before a held call's deadline that ``call.expiring`` is sent.
COUNTERSIGN_EXPIRING_NOTICE = env_int(
    "COUNTERSIGN_EXPIRING_NOTICE", 300, minimum=1, maximum=31_536_000
)
# Hours after a message is written that failed attempts are still retried; then it is failed.
COUNTERSIGN_NOTIFY_RETRY_HOURS = env_int(
    "COUNTERSIGN_NOTIFY_RETRY_HOURS", 24, minimum=1, maximum=720
)
# Threads per delivery loop sending messages: at most this many receivers are waited on at once.
COUNTERSIGN_NOTIFY_THREADS = env_int("COUNTERSIGN_NOTIFY_THREADS", 4, minimum=1, maximum=64)
# Days delivered and failed messages (and their attempts) are kept; pending ones always are.
COUNTERSIGN_NOTIFY_KEEP_DAYS = env_int("COUNTERSIGN_NOTIFY_KEEP_DAYS", 30, minimum=1, maximum=3650)
