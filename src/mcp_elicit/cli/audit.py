"""`mcp-elicit audit ...`: verify the audit trail's tamper evidence, export it, seal it, print its public keys.

The served app seals the trail every few seconds when `MCP_ELICIT_AUDIT_KEYS` is set, and once more as it
stops (see `mcp_elicit.server.audit_sealer`); the commands that write audit rows seal what they wrote when it is
set; `seal` does one round by hand (cron, a store no server runs on). `verify` checks every chain, head and
checkpoint (see `mcp_elicit.store.audit`) against public keys it takes from `--keys` (the published document,
as a file or its URL) or derives from `MCP_ELICIT_AUDIT_KEYS`, never from the store: whoever can write to the
database could store a key of their own there. Its guarantee holds relative to an anchor, a checkpoint's
`ID:ROOT` kept outside the database (verify prints the latest, the served app logs each): `--anchor` (or
`--anchors FILE`) requires those checkpoints to be there as they were, so that deleting the latest checkpoints
and resealing rewritten rows is found. A row left covered by no checkpoint longer than `--max-exposure` (10
minutes unless given) is a break too, whatever the checkpoints say; a store sealed only by hand takes a window
at its sealing's cadence, or `off`.

Exit codes: 0 done (for `verify`: the trail is sound); 1 `verify` found a break, the first named on stderr, or
`seal` refused to sign over a trail edited by hand; 2 a usage error (no keys, a keys document or anchor that
cannot be read, a bad `--since` or `--max-exposure`) or a store that cannot be used.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from mcp_elicit.cli import _render
from mcp_elicit.cli._sealing import seal_all
from mcp_elicit.cli._store import StoreOption, err, left_unsealed, operator_store, say, signing_keys
from mcp_elicit.model import JSONObject
from mcp_elicit.model.audit_keys import AuditPublicKeys, AuditSigningKeys
from mcp_elicit.settings import variable
from mcp_elicit.store.audit import DEFAULT_MAX_EXPOSURE, Anchor, AuditReport, AuditSealRefused, BreakKind, SealedRow

app = typer.Typer(help="Verify, export and seal the tamper-evident audit trail.", no_args_is_help=True)

USAGE = 2
BROKEN = 1
PAGE = 1000
_KEYS_VARIABLE = variable("audit_keys")
_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_DEFAULT = f"{int(DEFAULT_MAX_EXPOSURE.total_seconds() // 60)}m"


def _needed_signing_keys(command: str) -> AuditSigningKeys:
    keys = signing_keys()
    if keys is None:
        say(err, "error:", "red", f"{command} needs the audit's signing keys: set {_KEYS_VARIABLE} (or its _FILE)")
        raise typer.Exit(USAGE)
    return keys


def _published(source: str) -> AuditPublicKeys:
    """The keys document at an http(s) URL or in a file."""
    try:
        if source.startswith(("https://", "http://")):
            import httpx2

            response = httpx2.get(source, timeout=30, follow_redirects=False)
            response.raise_for_status()
            document: Any = response.json()
        else:
            document = json.loads(Path(source).read_text(encoding="utf-8"))
        return AuditPublicKeys.from_document(document)
    except (OSError, ValueError) as error:
        say(err, "error:", "red", f"cannot read the audit keys from {source}: {error}")
        raise typer.Exit(USAGE) from None
    except Exception as error:  # an HTTP failure of any kind
        say(err, "error:", "red", f"cannot fetch the audit keys from {source}: {type(error).__name__}: {error}")
        raise typer.Exit(USAGE) from None


def _max_exposure(value: str) -> timedelta | None:
    if value == "off":
        return None
    found = _DURATION.fullmatch(value.strip())
    if found is None or int(found[1]) < 1:
        raise typer.BadParameter(f"{value!r} is not a duration: 90s, 10m, 2h, 1d (or off)")
    return timedelta(**{_UNITS[found[2]]: int(found[1])})


def _anchors(given: list[str], path: Path | None) -> list[Anchor]:
    lines = list(given)
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            say(err, "error:", "red", f"cannot read the anchors from {path}: {error}")
            raise typer.Exit(USAGE) from None
        lines += [line for line in (raw.split("#", 1)[0].strip() for raw in text.splitlines()) if line]
    try:
        return [Anchor.parse(line) for line in lines]
    except ValueError as error:
        say(err, "error:", "red", str(error))
        raise typer.Exit(USAGE) from None


@app.command("verify")
def verify(
    store: StoreOption = None,
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys",
            metavar="FILE|URL",
            help=f"The published audit keys document (a file, or the server's /.well-known/mcp-elicit/audit-keys); "
            f"default: derived from {_KEYS_VARIABLE}.",
            show_default=False,
        ),
    ] = None,
    anchor: Annotated[
        list[str] | None,
        typer.Option(
            "--anchor",
            metavar="ID:ROOT",
            help="A checkpoint recorded outside the store (as verify prints it, or the server logs it) that must be "
            "there with that root; repeatable.",
            show_default=False,
        ),
    ] = None,
    anchors_file: Annotated[
        Path | None,
        typer.Option(
            "--anchors", metavar="FILE", help="A file of anchors, ID:ROOT one a line (# comments).", show_default=False
        ),
    ] = None,
    max_exposure: Annotated[
        str,
        typer.Option(
            "--max-exposure",
            metavar="DURATION",
            help="A row covered by no checkpoint for longer than this is a break, whatever the checkpoints say: "
            "90s, 10m, 2h, 1d, or off. A served app seals every few seconds and as it stops, and the commands "
            "that write audit rows seal them; a store sealed only by hand (`mcp-elicit audit seal`) takes a window "
            "longer than its sealing's cadence, or off.",
        ),
    ] = _DEFAULT,
) -> None:
    """Check every chain, head, checkpoint and anchor: exit 0 when the trail is sound, 1 naming the first break."""
    exposure = _max_exposure(max_exposure)
    anchors = _anchors(anchor or [], anchors_file)
    if keys is not None:
        public = _published(keys)
    else:
        signing = signing_keys()
        if signing is None:
            say(err, "error:", "red", f"give --keys FILE|URL (the published audit keys), or set {_KEYS_VARIABLE}")
            raise typer.Exit(USAGE)
        public = signing.public()
    with operator_store(store) as opened:
        report = opened.verify_audit(public, anchors=anchors, max_exposure=exposure)
        url = opened.display_url
    if not report.sound:
        first = report.breaks[0]
        more = len(report.breaks) - 1
        also = f" (and {more} more break{'s' if more > 1 else ''} after it)" if more else ""
        say(err, "broken:", "red", f"the audit trail of {url} was tampered with at {first}{also}")
        if first.kind is BreakKind.EXPOSED:
            say(
                err,
                "note:",
                "yellow",
                "a store sealed only by hand (`mcp-elicit audit seal`) takes --max-exposure longer than its sealing's"
                " cadence, or off; otherwise the rows were left unsealed, by a sealer that stopped or refused, or by"
                " whoever deleted the checkpoints that covered them: compare the last checkpoint with your anchors",
            )
        raise typer.Exit(BROKEN)
    typer.echo(_sound(report))


def _sound(report: AuditReport) -> str:
    last = report.last_checkpoint
    lines = [f"sound: {report.chains:,} chains, {report.rows_sealed:,} rows sealed"]
    if last is None:
        lines.append("no checkpoint yet")
    else:
        when = last.sealed_at.astimezone(UTC).isoformat(timespec="seconds")
        lines.append(f"last checkpoint {last.checkpoint_id} at {when}, root {last.root}, key {report.last_key_id}")
        lines.append(
            "it was written while a served app's sealer ran"
            if last.sealer_running
            else "it was written as a served app's sealer stopped, or by hand"
        )
        lines.append(f"anchor: {report.anchor} (keep it outside the database; give it to --anchor next time)")
    if report.anchors:
        lines.append(f"{report.anchors} anchor{'s' if report.anchors > 1 else ''} found as recorded")
    oldest = report.oldest_unsealed_at
    lines.append(
        f"{report.unsealed:,} rows written since, not yet covered by a checkpoint (the exposure window), the oldest "
        f"at {oldest.astimezone(UTC).isoformat(timespec='seconds')}"
        if report.unsealed and oldest is not None
        else "every row is covered by a checkpoint"
    )
    if report.migrated_rows:
        lines.append(
            f"{report.migrated_rows:,} rows (seq up to {report.migrated_through}) were written before the audit was "
            "chained (schema 11), and chained at migration, not when written"
        )
    return "\n".join(lines)


@app.command("seal")
def seal(store: StoreOption = None) -> None:
    """Chain the rows written since the last seal and sign a checkpoint (what a served app does every few seconds)."""
    keys = _needed_signing_keys("audit seal")
    with operator_store(store) as opened:
        try:
            sealed = seal_all(opened, keys)
        except AuditSealRefused as error:
            say(err, "refused:", "red", f"not sealing the audit trail of {opened.display_url}: {error}")
            raise typer.Exit(BROKEN) from None
    left_unsealed(sealed)
    count, plural = sealed.checkpoints, "s" if sealed.checkpoints > 1 else ""
    if not count:
        typer.echo("nothing to seal: every row is sealed (or another instance is sealing now)")
    else:
        typer.echo(f"sealed {sealed.rows:,} rows in {count} checkpoint{plural}; last checkpoint {sealed.last}")
    if sealed.unreadable:
        raise typer.Exit(BROKEN)


@app.command("keys")
def keys() -> None:
    """Print the audit's public keys document (as the served app publishes it), from the signing keys."""
    signing = _needed_signing_keys("audit keys")
    typer.echo(json.dumps(signing.public().document(), indent=2))


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time (2026-01-31 or 2026-01-31T09:00:00Z)") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@app.command("export")
def export(
    store: StoreOption = None,
    output_format: Annotated[Literal["jsonl"], typer.Option("--format", help="One JSON object a line.")] = "jsonl",
    since: Annotated[
        str | None, typer.Option(metavar="ISO", help="Only rows at or after this time (UTC unless it says).")
    ] = None,
    operation: Annotated[
        str | None,
        typer.Option(metavar="ID", help="Only the rows of this operation, its decisions and the grants they made."),
    ] = None,
) -> None:
    """Write the audit rows, oldest first: who did what, with which role, why, on which arguments and grant.

    Details are as stored: redacted values stay redacted. `chain_seq` and `row_hash` are null for a row not
    sealed yet.
    """
    start = _since(since)
    with operator_store(store) as opened:
        after = 0
        while True:
            page = opened.audit_export(after=after, limit=PAGE, since=start, operation_id=operation)
            for row in page:
                sys.stdout.write(json.dumps(_exported(row), ensure_ascii=False, sort_keys=False) + "\n")
            if len(page) < PAGE:
                break
            after = page[-1].entry.seq
    sys.stdout.flush()


def _exported(row: SealedRow) -> JSONObject:
    entry, details = row.entry, row.entry.details
    line: JSONObject = {
        **_render.audit_json(entry),
        "at": entry.at.astimezone(UTC).isoformat(timespec="microseconds"),
        "chain_seq": row.chain_seq,
        "row_hash": row.row_hash,
    }
    roles = details.get("roles")
    if roles is not None:
        line["roles"] = roles
    digest = details.get("request_digest", details.get("proposal"))
    if digest is not None:
        line["argument_digest"] = digest
    grant = entry.subject_id if entry.subject_kind.value == "grant" else details.get("grant_id")
    if grant is not None:
        line["grant_id"] = grant
    return line


__all__ = ["app"]
