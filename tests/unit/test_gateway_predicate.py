"""A gate's `when` from the config file: what it reads, what it refuses at start, and how it decides."""

from __future__ import annotations

import pytest

from mcp_elicit.gateway.predicate import Predicate, PredicateError


@pytest.mark.parametrize(
    ("source", "arguments", "applies"),
    [
        ("amount > 100", {"amount": 250}, True),
        ("amount > 100", {"amount": 20}, False),
        ("currency == 'EUR' and amount >= 1000", {"currency": "EUR", "amount": 1000}, True),
        ("currency in ['EUR', 'GBP']", {"currency": "USD"}, False),
        ("not dry_run", {"dry_run": False}, True),
        ("dry_run is None", {}, True),
        ('args["max-price"] > 10', {"max-price": 11}, True),
        ('args["max-price"] is None', {}, True),
        ("startswith(lower(path), '/etc/')", {"path": "/ETC/passwd"}, True),
        ("endswith(upper(name), '.TXT')", {"name": "notes.txt"}, True),
        ("len(recipients) > 2 or 'ceo@example.com' in recipients", {"recipients": ["ceo@example.com"]}, True),
        ("items[0]['qty'] * price > 50", {"items": [{"qty": 3}], "price": 20}, True),
        ("amount > 100 if currency == 'EUR' else amount > 90", {"currency": "USD", "amount": 95}, True),
        ("max(a, b) - abs(c) // 2 % 7 == 3", {"a": 1, "b": 4, "c": -2}, True),
    ],
)
def test_it_decides_from_the_arguments(source: str, arguments: dict[str, object], applies: bool) -> None:
    assert Predicate.compile(source)(arguments) is applies


def test_it_names_the_arguments_it_reads() -> None:
    predicate = Predicate.compile('amount > limit and args["max-price"] < len(note) and lower(x) == "y"')
    assert predicate.names == {"amount", "limit", "max-price", "note", "x"}
    assert predicate.unknown(["amount", "note", "x", "max-price"]) == ["limit"]


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("", "empty"),
        ("amount >", "is not an expression"),
        ("amount > > 1", "is not an expression at column 10"),
        ("path.startswith('/etc')", "attributes and methods are not available (.startswith)"),
        ("__import__('os').system('true')", "attributes and methods are not available (.system)"),
        ("__import__('os') == 1", "only these functions can be called"),
        ("open('/etc/passwd')", "only these functions can be called"),
        ("(lambda: 1)()", "only these functions can be called"),
        ("[x for x in items]", "comprehensions are not available"),
        ("2 ** 1000000", "** is not available"),
        ("(y := 1)", "assignments are not available"),
        ("f'{amount}' == '1'", "f-strings are not available"),
        ("{'a': 1}['a'] == 1", "Dict is not available"),
        ("len(x=items)", "by position only"),
        ("args[key] == 1", "args[...] takes an argument's name, in quotes"),
        ("b'x' == amount", "bytes literals are not available"),
        ("amount > 1; True", "not an expression"),
        ("(" * 500 + "1" + ")" * 500, "nest"),
        ("-" * 200_000 + "1", "nests too deeply"),
    ],
)
def test_what_it_cannot_read_is_refused_at_start(source: str, said: str) -> None:
    with pytest.raises(PredicateError) as refused:
        Predicate.compile(source)
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("source", "arguments", "said"),
    [
        ("amount > 100", {}, "TypeError"),
        ("amount", {"amount": 3}, "gave int 3, not true or false"),
        ("items[3] == 1", {"items": []}, "IndexError"),
        ("1 / amount > 0", {"amount": 0}, "ZeroDivisionError"),
        ("len(note * 100000) > 1", {"note": "xx"}, "could not be decided"),
    ],
)
def test_a_call_it_cannot_decide_raises_so_that_the_gate_applies(
    source: str, arguments: dict[str, object], said: str
) -> None:
    predicate = Predicate.compile(source)
    with pytest.raises(PredicateError) as undecided:
        predicate(arguments)
    assert said in str(undecided.value)


def test_formatting_with_percent_is_refused_so_no_call_builds_a_huge_text() -> None:
    predicate = Predicate.compile("amount % 100 == 0")
    assert predicate({"amount": 300})
    with pytest.raises(PredicateError, match="takes numbers, not str and int"):
        predicate({"amount": "%01000000000d"})
    with pytest.raises(PredicateError, match="takes numbers"):
        Predicate.compile("note // 2 == 1")({"note": "x"})
