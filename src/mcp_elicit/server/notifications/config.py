"""What a served app notifies, whom, and how hard it tries: webhook and mail subscriptions, their retry policy, and
the signed links to decision pages their messages carry."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal
from urllib.parse import urlsplit

from mcp_elicit.server.notifications.links import DecisionLinks
from mcp_elicit.server.notifications.mail import Mail
from mcp_elicit.server.notifications.signing import WebhookSecret
from mcp_elicit.settings import Settings, SettingsError, variable
from mcp_elicit.store.protocol import NotificationEvent

URL_ENV = variable("webhook_url")
SECRET_ENV = variable("webhook_secret")
EVENTS_ENV = variable("webhook_events")
FORMAT_ENV = variable("webhook_format")
ALL_EVENTS = frozenset(NotificationEvent)
FORMATS = ("standard", "slack")
WebhookFormat = Literal["standard", "slack"]
_MAIL_SETTINGS = ("smtp_host", "smtp_port", "smtp_security", "smtp_username", "smtp_password", "mail_from", "mail_to")


@dataclass(frozen=True, slots=True)
class Retry:
    """Exponential backoff between attempts, and when to give up (the delivery is then marked dead and logged).

    With the defaults a failing receiver is tried at about 10 s, 20 s, 40 s ... then hourly, 15 attempts in
    all (some 9 hours), and never for an event older than 3 days. Each pause strays by up to a fifth either
    way, so deliveries that failed together do not come back together.
    """

    first: timedelta = timedelta(seconds=10)
    factor: float = 2.0
    ceiling: timedelta = timedelta(hours=1)
    attempts: int = 15
    max_age: timedelta = timedelta(days=3)

    def __post_init__(self) -> None:
        if self.first <= timedelta(0) or self.ceiling < self.first:
            raise ValueError(f"retry pauses must be positive, the ceiling at least the first ({self.first})")
        if self.factor < 1 or self.attempts < 1 or self.max_age <= timedelta(0):
            raise ValueError("a retry policy needs factor >= 1, attempts >= 1 and a positive max_age")

    def pause(self, attempts: int) -> timedelta:
        """The pause after the `attempts`-th failed attempt, before jitter."""
        seconds = self.first.total_seconds() * self.factor ** min(max(attempts - 1, 0), 64)
        return timedelta(seconds=min(seconds, self.ceiling.total_seconds()))

    def gives_up(self, attempts: int, age: timedelta) -> bool:
        return attempts >= self.attempts or age >= self.max_age


@dataclass(frozen=True, slots=True)
class Webhook:
    """One subscription: events POSTed as JSON to `url`, in the webhook's `format`.

    `format="standard"` (the default) is Standard Webhooks' JSON (`payload`), signed with `secret`, which it
    needs. `format="slack"` is a message for a Slack-style incoming webhook (`slack_payload`): Slack checks no
    signature (the URL is the secret), so such a webhook takes no `secret`.

    `name` keys its rows in the outbox and names the webhook in the log. By default it is the URL's origin
    and a digest of the whole URL (`https://hooks.example (3f9a0c2b1d4e)`): a webhook's path and query are
    often its secret, so neither is stored or logged, while two webhooks on one host keep apart. Every
    instance serving the store must give the same webhook the same name and secret.
    """

    url: str = field(repr=False)
    secret: WebhookSecret | str | bytes | None = field(default=None, repr=False)
    events: AbstractSet[NotificationEvent] = ALL_EVENTS
    name: str | None = None
    format: WebhookFormat = "standard"

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a webhook URL is an http(s) URL with a host (this one's scheme: {parts.scheme!r})")
        if self.format not in FORMATS:
            raise ValueError(f"a webhook's format is {' or '.join(FORMATS)}, not {self.format!r}")
        if self.format == "slack" and self.secret is not None:
            raise ValueError(
                f"webhook {self.origin} is in the slack format, which is not signed (Slack checks no signature; the "
                "URL is the secret): give it no secret"
            )
        if self.format == "standard" and self.secret is None:
            raise ValueError(
                f"webhook {self.origin} needs a secret: Standard Webhooks signs every delivery with it "
                "(whsec_<base64 of 24+ bytes>)"
            )
        if self.secret is not None and not isinstance(self.secret, WebhookSecret):
            object.__setattr__(self, "secret", WebhookSecret(self.secret))
        events = frozenset(NotificationEvent(event) for event in self.events)
        if not events:
            raise ValueError(f"webhook {self.origin} subscribes to no event; give at least one of {_names()}")
        object.__setattr__(self, "events", events)
        if self.name is None:
            object.__setattr__(self, "name", self._default_name)

    @property
    def key(self) -> WebhookSecret | None:
        """The signing key; None for a webhook in the slack format, which is not signed."""
        assert self.secret is None or isinstance(self.secret, WebhookSecret)
        return self.secret

    @property
    def subscription(self) -> str:
        assert self.name is not None
        return self.name

    @property
    def origin(self) -> str:
        """Scheme, host and port: all of the URL that is ever logged."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}{_port(parts.port)}"

    @property
    def former_name(self) -> str | None:
        """The name a webhook named by default had until names left the URL's path out (the URL without query
        or credentials), under which a store may still hold its subscription and deliveries; None if named."""
        if self.name != self._default_name:
            return None
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}{_port(parts.port)}{parts.path}"

    @property
    def _default_name(self) -> str:
        return f"{self.origin} ({hashlib.sha256(self.url.encode()).hexdigest()[:12]})"


@dataclass(frozen=True, slots=True)
class Notifications:
    """The targets a served app delivers the outbox to, and how.

    `targets` lists where events go: `Webhook`s and `Mail` targets, each with its own name. `links` signs the link to
    the decision's page that "decision waiting", "decision escalated" and "task needs input" carry (`data.link`, the
    Slack button, the mail's link); give it the app's public base URL and the key the pages have
    (`WebPages.page_key`), or no link is sent. `timeout` bounds each attempt (seconds); `poll` is how often the outbox
    is looked at for due deliveries; `batch` how many are attempted at once; settled deliveries are deleted `keep`
    after they settled.
    """

    targets: Sequence[Webhook | Mail]
    retry: Retry = Retry()
    timeout: float = 10.0
    poll: timedelta = timedelta(seconds=1)
    batch: int = 20
    keep: timedelta = timedelta(days=7)
    links: DecisionLinks | None = None

    def __post_init__(self) -> None:
        names = [hook.subscription for hook in self.targets]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"notification targets share the name {', '.join(repeated)}: give each its own name=")
        if self.timeout <= 0 or self.poll <= timedelta(0) or self.batch < 1:
            raise ValueError("notifications need a positive timeout and poll, and a batch of at least 1")

    @property
    def lease(self) -> timedelta:
        """How long a claimed delivery is left to its deliverer before another may take it (crash or hang)."""
        return timedelta(seconds=3 * self.timeout + 5)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifications | None:
        """The webhook of `MCP_ELICIT_WEBHOOK_URL` (with `_SECRET`, `_EVENTS`, comma-separated, default all, and
        `_FORMAT`) and the mail target of `MCP_ELICIT_SMTP_HOST` (with `_PORT`, `_SECURITY`, `_USERNAME`,
        `_PASSWORD`, and `MCP_ELICIT_MAIL_FROM` and `_TO`: "decision waiting" and "decision escalated" by mail); the
        secrets each from a `_FILE` if need be (see `mcp_elicit.settings`). `None` when neither is set. Every problem
        names its variable; `links` is the caller's to add (it knows the public URL and the pages' key)."""
        names = ["webhook_url", "webhook_secret", "webhook_events", "webhook_format", *_MAIL_SETTINGS]
        settings = Settings.read(environ, only=names)
        targets: list[Webhook | Mail] = []
        problems: list[str] = []
        if settings.webhook_url is not None:
            try:
                targets.append(_webhook(settings))
            except ValueError as error:
                problems.append(str(error))
        if settings.smtp_host is not None:
            try:
                targets.append(_mail(settings))
            except ValueError as error:
                problems.append(str(error))
        if problems:
            raise SettingsError(problems)
        return cls(targets) if targets else None


def _webhook(settings: Settings) -> Webhook:
    assert settings.webhook_url is not None
    form = settings.webhook_format or "standard"
    if settings.webhook_secret is None and form == "standard":
        raise ValueError(f"{SECRET_ENV} is not set, and {URL_ENV} needs it (whsec_<base64 of 24+ bytes>)")
    if settings.webhook_secret is not None and form == "slack":
        raise ValueError(
            f"{SECRET_ENV} is set, and {FORMAT_ENV}=slack is not signed (Slack checks no signature; the URL is "
            "the secret): unset it"
        )
    try:
        return Webhook(
            settings.webhook_url.get_secret_value(),
            None if settings.webhook_secret is None else settings.webhook_secret.get_secret_value(),
            _events(settings.webhook_events),
            format=form,
        )
    except ValueError as error:
        raise ValueError(f"{URL_ENV}/{SECRET_ENV}/{EVENTS_ENV}: {error}") from None


def _mail(settings: Settings) -> Mail:
    assert settings.smtp_host is not None
    host, sender, to = variable("smtp_host"), variable("mail_from"), variable("mail_to")
    missing = [name for name, value in ((sender, settings.mail_from), (to, settings.mail_to)) if not value]
    if missing:
        raise ValueError(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set, and {host} needs it")
    password = settings.smtp_password
    if (settings.smtp_username is None) != (password is None):
        given, lacking = ("smtp_username", "smtp_password") if password is None else ("smtp_password", "smtp_username")
        raise ValueError(f"{variable(given)} is set, and needs {variable(lacking)}: set both, or neither")
    assert settings.mail_from is not None
    try:
        return Mail(
            settings.smtp_host,
            settings.mail_from,
            settings.mail_to,
            port=settings.smtp_port,
            security=settings.smtp_security or "starttls",
            username=settings.smtp_username,
            password=None if password is None else password.get_secret_value(),
        )
    except ValueError as error:
        raise ValueError(f"{host}/{sender}/{to}: {error}") from None


def _events(names: Sequence[str]) -> frozenset[NotificationEvent]:
    unknown = [name for name in names if name not in {event.value for event in NotificationEvent}]
    if unknown:
        raise ValueError(f"unknown event {', '.join(unknown)}; the events are {_names()}")
    return frozenset(NotificationEvent(name) for name in names) if names else ALL_EVENTS


def _names(events: Iterable[NotificationEvent] = NotificationEvent) -> str:
    return ", ".join(event.value for event in events)


def _port(port: int | None) -> str:
    return "" if port is None else f":{port}"
