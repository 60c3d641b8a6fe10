"""The identities table (pd_constructs/inventory/identities.py) checked two ways against what is
synthesized (tests/identity_facts.py reads the templates): every IAM role matches exactly one
row and every row a role, with exactly the row's rights; every RBAC subject our manifests bind
is a row with exactly its rules. Failures name the role, row, right or rule."""

from __future__ import annotations

from fnmatch import fnmatch

import pytest

from pd_constructs.inventory import identities
from pd_constructs.inventory.identities import RBAC, ROLES, RbacSubject, Role
from tests.identity_facts import RoleFacts, rbac_facts, role_facts
from tests.synth import ROOT, Synthesized

APPS = ("default_app", "variant_app", "token_app")


def test_docs_identities_md_is_rendered_from_the_table() -> None:
    doc = (ROOT / "docs" / "identities.md").read_text(encoding="utf-8")
    assert doc == identities.markdown(), (
        "docs/identities.md differs from pd_constructs/inventory/identities.py: run "
        "`.venv/bin/python -m pd_constructs.inventory.identities > docs/identities.md`"
    )


def _row_for(where: str, rows: list[Role]) -> list[Role]:
    """The rows whose patterns match ``where``, the most specific (longest pattern) first."""
    matched = []
    for row in rows:
        best = max((len(p) for p in row.paths if fnmatch(where, p)), default=-1)
        if best >= 0:
            matched.append((best, row))
    matched.sort(key=lambda m: -m[0])
    if len(matched) > 1 and matched[0][0] == matched[1][0]:
        return [m[1] for m in matched]  # ambiguous: the caller reports it
    return [m[1] for m in matched[:1]]


def _by_row(app: Synthesized) -> tuple[dict[str, list[RoleFacts]], list[str]]:
    rows = [r for r in ROLES if r.applies(app.config)]
    grouped: dict[str, list[RoleFacts]] = {r.id: [] for r in rows}
    problems = []
    for where, facts in sorted(role_facts(app).items()):
        matched = _row_for(where, rows)
        if len(matched) != 1:
            names = [r.id for r in matched]
            problems.append(f"role {where} matches {names or 'no row'} of this configuration")
            continue
        grouped[matched[0].id].append(facts)
    return grouped, problems


@pytest.mark.parametrize("app", APPS, indirect=True)
def test_every_role_is_one_row_and_every_row_a_role(app: Synthesized) -> None:
    grouped, problems = _by_row(app)
    problems += [f"row {row} matches no role" for row, found in grouped.items() if not found]
    assert not problems, problems


@pytest.mark.parametrize("app", APPS, indirect=True)
def test_each_row_states_exactly_what_its_roles_may_do(app: Synthesized) -> None:
    """Per row: the union over its roles equals the row, and each role holds no more."""
    grouped, _ = _by_row(app)
    rows = {r.id: r for r in ROLES}
    problems = []
    for row_id, found in grouped.items():
        row = rows[row_id]
        for field in (
            "principals",
            "actions",
            "managed",
            "service_accounts",
            "kubernetes_groups",
            "access_policies",
        ):
            declared = row.formatted(getattr(row, field), app.config)
            held: set[str] = set()
            for facts in found:
                mine = getattr(facts, field)
                if not mine <= declared:
                    problems.append(
                        f"{row_id} {facts.where} {field} extra: {sorted(mine - declared)}"
                    )
                held |= mine
            if found and declared - held:
                problems.append(
                    f"{row_id} {field} declared but held by none: {sorted(declared - held)}"
                )
    assert not problems, problems


@pytest.mark.parametrize("app", APPS, indirect=True)
def test_rbac_subjects_are_exactly_the_table(app: Synthesized) -> None:
    bound = rbac_facts(app)
    rows = {s.subject: s for s in RBAC if s.applies(app.config)}
    problems = [
        f"subject {k} is bound but not in the table" for k in sorted(set(bound) - set(rows))
    ]
    problems += [f"row {rows[k].id} is bound nowhere" for k in sorted(set(rows) - set(bound))]
    for subject in set(bound) & set(rows):
        declared = rows[subject].formatted_rules(app.config)
        if bound[subject] != declared:
            problems.append(
                f"{rows[subject].id}: extra {sorted(bound[subject] - declared)}, "
                f"missing {sorted(declared - bound[subject])}"
            )
    assert not problems, problems


def test_every_row_is_checked_by_some_configuration(
    default_app: Synthesized, variant_app: Synthesized, token_app: Synthesized
) -> None:
    configs = (default_app.config, variant_app.config, token_app.config)
    rows: list[Role | RbacSubject] = [*ROLES, *RBAC]
    unchecked = {r.id for r in rows if not any(r.applies(c) for c in configs)}
    assert unchecked == set(identities.NOT_SYNTHESIZED_IN_TESTS)
