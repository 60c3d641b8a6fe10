"""A digest of every entry of the default app's templates (each resource, output, parameter,
condition, mapping and rule, by logical id), committed as ``tests/fixtures/template-digests.json``
and compared by ``tests/test_template_digests.py``: a refactoring net (STYLE 11) that proves a
change meant to leave the templates alone (moving modules, renaming helpers, tidying a
construct) does, and names the logical ids that changed when one does not.

Why this shape rather than a snapshot of the templates or one hash per stack:

- One short line per logical id: the templates themselves are large and churn with every
  feature, while a review of a change that does touch them should see which resources it
  changes, adds or removes, in a file small enough to merge (two branches that both refresh it
  conflict only where they changed the same resources; refresh again after the merge). The
  detail is in ``cdk.out``.
- File assets' hashes (``<64 hex>.zip``: Lambda handlers, the shared layer, the kubectl and Helm
  layers, vendored charts) are masked, and each resource's ``aws:asset:*`` metadata (the source
  path, different in every clone) is dropped. A handler's code changes often and is proven by
  its own tests; what the digests hold is the wiring: ids, properties, references, policies.
- Only the default app (the one session synth the suite has anyway; no synth of its own): the
  variants' branches have their fine-grained tests.

After an intended change of the templates, refresh it (and say why in the commit):

    .venv/bin/python -m tests.template_digests > tests/fixtures/template-digests.json
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DIGESTS = ROOT / "tests" / "fixtures" / "template-digests.json"
REFRESH = ".venv/bin/python -m tests.template_digests > tests/fixtures/template-digests.json"

# An asset's hash: 64 hex digits, but not an image digest (``sha256:<64 hex>``) of a setting.
_ASSET_HASH = re.compile(r"(?<![0-9a-f])(?<!sha256:)[0-9a-f]{64}(?![0-9a-f])")


def _masked(entry: Any) -> Any:
    if isinstance(entry, dict):
        return {
            k: _masked(v)
            for k, v in entry.items()
            if not (isinstance(k, str) and k.startswith("aws:asset:"))
        }
    if isinstance(entry, list):
        return [_masked(v) for v in entry]
    if isinstance(entry, str):
        return _ASSET_HASH.sub("<asset>", entry)
    return entry


def digest(entry: Any) -> str:
    text = json.dumps(_masked(entry), sort_keys=True, separators=(",", ":"))
    assert str(ROOT) not in text, f"a path of this clone in a template entry: {text[:200]}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digests(templates: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Stack id -> ``<section>/<logical id>`` (or the section, for a plain value such as
    ``Description``) -> the masked entry's digest."""
    found: dict[str, dict[str, str]] = {}
    for stack, template in templates.items():
        entries: dict[str, str] = {}
        for section, body in template.items():
            if isinstance(body, dict):
                entries.update({f"{section}/{k}": digest(v) for k, v in body.items()})
            else:
                entries[section] = digest(body)
        found[stack] = dict(sorted(entries.items()))
    return found


def differences(
    expected: Mapping[str, Mapping[str, str]], actual: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """``<stack> <entry>: changed|added|removed``, one per entry that differs."""
    found = []
    for stack in sorted(set(expected) | set(actual)):
        old, new = expected.get(stack, {}), actual.get(stack, {})
        for key in sorted(set(old) | set(new)):
            if key not in old:
                found.append(f"{stack} {key}: added")
            elif key not in new:
                found.append(f"{stack} {key}: removed")
            elif old[key] != new[key]:
                found.append(f"{stack} {key}: changed")
    return found


def main() -> None:
    """Print the default app's digests (synthesized as the test session's ``default_app``)."""
    from ray_pd_eks.node_runtime import use_project_node

    use_project_node()
    from tests.synth import synth

    json.dump(digests(synth().templates), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
