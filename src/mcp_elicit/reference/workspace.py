"""The reference server's workspace: a directory standing in for the systems the tools act on.

Services with pending releases and per-environment deployments, a procurement catalog with an order
book, a sandbox of files to delete, a ticket queue and the suppliers' invoices to pay. Every write goes
through an idempotency key, the way a real external system would take one, so a step re-run after a crash
writes nothing twice.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

ENVIRONMENTS = ("staging", "production")


class FileChange(BaseModel):
    added: list[str] = []
    changed: list[str] = []
    removed: list[str] = []

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)

    def describe(self) -> str:
        parts = [f"{label} {', '.join(names)}" for label, names in (
            ("add", self.added), ("change", self.changed), ("remove", self.removed)) if names]  # fmt: skip
        return "; ".join(parts) or "no change"


class Offer(BaseModel):
    sku: str
    name: str
    vendor: str
    price: float
    category: str


class Match(BaseModel):
    path: str
    size: int


class Invoice(BaseModel):
    number: str
    vendor: str
    amount: int
    """In cents."""
    currency: str

    @property
    def shown(self) -> str:
        return f"{self.currency} {self.amount // 100:,}.{self.amount % 100:02d}"


INVOICES = (
    Invoice(number="INV-1042", vendor="Northwind", amount=48_250, currency="EUR"),
    Invoice(number="INV-1043", vendor="Contoso", amount=12_900, currency="EUR"),
)
"""The invoices awaiting payment: fixed, so that a workspace seeded before they existed has them too."""


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def open(cls, root: Path) -> Workspace:
        """Open a workspace, seeding the sample systems into a new or empty directory."""
        workspace = cls(root)
        if not (root / "catalog.json").exists():
            workspace.seed()
        return workspace

    def seed(self) -> None:
        release = self.root / "services" / "payments" / "release"
        release.mkdir(parents=True, exist_ok=True)
        (release / "app.py").write_text("VERSION = '2.4.0'\n")
        (release / "config.yaml").write_text("timeout: 30\nretries: 3\n")
        (release / "migrations.sql").write_text("ALTER TABLE invoices ADD COLUMN currency TEXT;\n")
        for environment in ENVIRONMENTS:
            deployed = self.root / "deployed" / environment / "payments"
            deployed.mkdir(parents=True, exist_ok=True)
            (deployed / "app.py").write_text("VERSION = '2.3.1'\n")
            (deployed / "config.yaml").write_text("timeout: 30\nretries: 3\n")
        docs = self.root / "services" / "docs" / "release"
        docs.mkdir(parents=True, exist_ok=True)
        (docs / "index.md").write_text("# Docs\n")
        catalog = [
            Offer(sku="LAP-14-A", name="14-inch laptop, 16 GB", vendor="Northwind", price=1149.0, category="laptop"),
            Offer(sku="LAP-14-B", name="14-inch laptop, 32 GB", vendor="Contoso", price=1490.0, category="laptop"),
            Offer(sku="LAP-16-C", name="16-inch laptop, 32 GB", vendor="Fabrikam", price=2190.0, category="laptop"),
            Offer(sku="MON-27-A", name="27-inch monitor", vendor="Northwind", price=329.0, category="monitor"),
            Offer(sku="MON-32-B", name="32-inch 4K monitor", vendor="Contoso", price=649.0, category="monitor"),
        ]
        (self.root / "catalog.json").write_text(json.dumps([offer.model_dump() for offer in catalog], indent=2))
        files = self.root / "files" / "logs"
        files.mkdir(parents=True, exist_ok=True)
        for day in range(1, 6):
            (files / f"app-2026-11-0{day}.log").write_text("log line\n" * (day * 40))
        (self.root / "files" / "keep.txt").write_text("not a log\n")
        for directory in ("orders", "tickets"):
            (self.root / directory).mkdir(exist_ok=True)

    # -- deploy -----------------------------------------------------------------------------------

    def release_of(self, service: str) -> Path:
        path = self._inside(self.root / "services" / service / "release")
        if not path.is_dir():
            raise LookupError(f"no pending release for service {service!r}")
        return path

    def plan(self, service: str, environment: str) -> FileChange:
        release = _files(self.release_of(service))
        deployed = _files(self._inside(self.root / "deployed" / environment / service))
        return FileChange(
            added=sorted(set(release) - set(deployed)),
            changed=sorted(name for name in set(release) & set(deployed) if release[name] != deployed[name]),
            removed=sorted(set(deployed) - set(release)),
        )

    def deploy(self, service: str, environment: str) -> int:
        """Make the environment's copy equal to the release; return how many files changed."""
        change = self.plan(service, environment)
        release = self.release_of(service)
        target = self._inside(self.root / "deployed" / environment / service)
        target.mkdir(parents=True, exist_ok=True)
        for name in change.added + change.changed:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(release / name, target / name)
        for name in change.removed:
            (target / name).unlink(missing_ok=True)
        return len(change.added) + len(change.changed) + len(change.removed)

    # -- procure ----------------------------------------------------------------------------------

    def offers(self, item: str, budget: float) -> list[Offer]:
        catalog = [Offer.model_validate(raw) for raw in json.loads((self.root / "catalog.json").read_text())]
        wanted = item.strip().lower()
        fitting = [o for o in catalog if wanted in (o.category + " " + o.name).lower() and o.price <= budget]
        return sorted(fitting, key=lambda offer: offer.price)

    def place_order(self, offer: Offer, idempotency_key: str) -> str:
        order = self.root / "orders" / f"{idempotency_key}.json"
        if not order.exists():
            order.write_text(json.dumps({"sku": offer.sku, "price": offer.price, "vendor": offer.vendor}))
        return order.stem

    def orders(self) -> list[Path]:
        return sorted((self.root / "orders").glob("*.json"))

    # -- delete_files -------------------------------------------------------------------------------

    def match(self, pattern: str) -> list[Match]:
        base = (self.root / "files").resolve()
        found = []
        for path in sorted(base.rglob("*")):
            relative = path.relative_to(base).as_posix()
            if path.is_file() and fnmatch.fnmatchcase(relative, pattern):
                found.append(Match(path=relative, size=path.stat().st_size))
        return found

    def delete(self, matches: list[Match]) -> int:
        base = (self.root / "files").resolve()
        deleted = 0
        for match in matches:
            path = self._inside(base / match.path, base)
            if path.is_file():
                path.unlink()
                deleted += 1
        return deleted

    # -- invoices -----------------------------------------------------------------------------------

    def invoice(self, number: str) -> Invoice:
        found = next((invoice for invoice in INVOICES if invoice.number == number.strip().upper()), None)
        if found is None:
            raise LookupError(f"no invoice {number!r}; awaiting payment: {', '.join(i.number for i in INVOICES)}")
        return found

    # -- tickets ------------------------------------------------------------------------------------

    def create_ticket(self, title: str, priority: str, idempotency_key: str) -> str:
        ticket = self.root / "tickets" / f"{idempotency_key}.json"
        if not ticket.exists():
            ticket.write_text(json.dumps({"title": title, "priority": priority}))
        return ticket.stem[-8:]

    def _inside(self, path: Path, base: Path | None = None) -> Path:
        root = (base or self.root).resolve()
        resolved = path.resolve()
        if resolved != root and root not in resolved.parents:
            raise LookupError(f"{path} is outside the workspace")
        return resolved


def _files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}
